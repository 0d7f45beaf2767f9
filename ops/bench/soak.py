"""Soak: mixed load at half the sustainable rate for a long time, watching for what only time shows (growing memory,
leaking connections or file descriptors, late errors, creeping latency). Goals and figures: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psutil

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, megabytes, outline, run_main
from ops.bench.pipeline import settle
from ops.bench.stack import BenchError, LocalStack, up_workers

JOBS = ("enrichment", "consolidation", "decay", "reflection", "cache_eviction")
ENGRAM_PROCESSES = ("gateway", "worker-turns", "worker-background", "beat")
RSS_GROWTH_GOAL = 0.10
P95_FLAT_GOAL = 0.20
# A user's chat moves to a new session after this many turns: one session growing all run would time ever
# longer histories, not steady load. Each user starts with HISTORY earlier conversations of HISTORY_MESSAGES.
SESSION_TURNS, HISTORY, HISTORY_MESSAGES = 10, 5, 20
USER_PREFIX = "soak-user-"
SETTLE_TIMEOUT_S = 600.0  # for the backlog the history or the calibration left
TOPICS = ("hiking in the Alps", "a sourdough starter", "learning Japanese", "the new job", "a cat named Miso")


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the soak started, when the operation was due
    op: str
    ms: float
    ok: bool


class Load:
    """The operations, each one HTTP exchange (a turn: its POST and the long poll until it is done)."""

    def __init__(self, url: str, api_key: str, users: int, session_turns: int = SESSION_TURNS) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=120)
        self.users = [f"{USER_PREFIX}{i}" for i in range(users)]
        self.session_turns = session_turns
        self._count = itertools.count(1)
        self._turns: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def prepare(self, history: int) -> None:
        """Every user exists (a search for a user engram has never seen is a 404), has a memory and `history`
        earlier conversations, the oldest `history` days ago."""
        for user in self.users:
            self.remember(user)
            for past in range(history):
                texts = [
                    f"Earlier, {TOPICS[(past + i) % len(TOPICS)]} came up ({past}.{i})."
                    for i in range(HISTORY_MESSAGES)
                ]
                self._messages(user, f"{user}-past-{past}", texts, datetime.now(UTC) - timedelta(days=history - past))

    def _messages(self, user: str, session: str, texts: list[str], said: datetime | None = None) -> None:
        """A conversation, user and assistant in turn, a minute apart from `said` (default: now)."""
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": text}
            | ({"created_at": (said + timedelta(minutes=i)).isoformat()} if said else {})
            for i, text in enumerate(texts)
        ]
        self._ok(self.http.post(f"/v1/users/{user}/sessions/{session}/messages", json={"messages": messages}))

    def _next(self) -> tuple[int, str]:
        n = next(self._count)  # atomic
        return n, self.users[n % len(self.users)]

    @staticmethod
    def _ok(response: httpx.Response) -> httpx.Response:
        if response.status_code >= 300:
            raise BenchError(f"{response.status_code} {response.text[:200]}")
        return response

    def turn(self) -> None:
        n, user = self._next()
        with self._lock:
            session = f"{user}-chat-{self._turns[user] // self.session_turns}"
            self._turns[user] += 1
        body = {"user_id": user, "text": f"Tell me more about {TOPICS[n % len(TOPICS)]}, please ({n})."}
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        turn = self._ok(self.http.post(f"/v1/sessions/{session}/turns", json=body, headers=headers)).json()
        turn_id = turn["turn_id"]
        while turn["status"] not in ("done", "failed"):
            turn = self._ok(self.http.get(f"/v1/turns/{turn_id}", params={"wait": 30})).json()
        if turn["status"] == "failed":
            raise BenchError(f"turn {turn_id} failed: {turn.get('error')}")

    def search(self) -> None:
        n, user = self._next()
        self._ok(self.http.post(f"/v1/users/{user}/memories/search", json={"query": TOPICS[n % len(TOPICS)]}))

    def context(self) -> None:
        n, user = self._next()
        body = {"query": f"What do I think about {TOPICS[n % len(TOPICS)]}?", "max_tokens": 1000}
        self._ok(self.http.post(f"/v1/users/{user}/context", json=body))

    def ingest(self) -> None:
        n, user = self._next()
        self._messages(user, f"{user}-import-{n}", [f"Message {i} of batch {n}: {TOPICS[i % 5]}." for i in range(20)])

    def remember(self, user: str | None = None) -> None:
        n, user = (0, user) if user else self._next()
        body = {"key": f"note {n % 50}", "value": f"The user mentioned {TOPICS[n % len(TOPICS)]} (note {n})."}
        self._ok(self.http.post(f"/v1/users/{user}/memories", json=body))


@dataclass(frozen=True)
class Calibration:
    rounds: int
    loop_s: float  # the closed loop, side load beside it
    settle_s: float  # then until the work the rounds left behind was done (`backlog`)
    settled: bool

    @property
    def answered_per_s(self) -> float:
        return self.rounds / self.loop_s

    @property
    def sustainable_per_s(self) -> float:
        """Rounds per second with their background work (extraction, embeddings, compaction) done too."""
        return self.rounds / (self.loop_s + self.settle_s)


def calibrate(load: Load, sessions: int, seconds: float, database_url: str) -> Calibration:
    """`sessions` clients each start their next round when the last is done, with the soak's side load beside
    them, for `seconds`; then the stack gets the time it needs to do what those rounds left behind."""
    deadline = time.monotonic() + seconds
    done = [0] * sessions
    stop = threading.Event()

    def client(index: int) -> None:
        while time.monotonic() < deadline:
            for operation in (load.turn, load.search, load.context):
                operation()
            done[index] += 1

    def side_load() -> None:
        for tick in itertools.count(1):
            if stop.wait(5.0):
                return
            load.remember()
            if tick % 2 == 0:
                load.ingest()

    started = time.monotonic()
    with ThreadPoolExecutor(sessions + 1) as pool:
        beside = pool.submit(side_load)
        for future in [pool.submit(client, i) for i in range(sessions)]:
            future.result()
        loop_s = time.monotonic() - started
        stop.set()
        beside.result()
    settle_s, _, settled = settle(database_url, USER_PREFIX, SETTLE_TIMEOUT_S, units=True)
    return Calibration(sum(done), loop_s, settle_s, settled)


def run_open_loop(
    load: Load, rate: float, seconds: float, window_s: float, stack: LocalStack
) -> tuple[list[Sample], list[str], list[dict[str, dict[str, float | int | None]]]]:
    """Every operation due at its time (its latency counts from then), on a pool large enough that the client
    is never the bottleneck; the samples, the first errors and the stack's processes at each window's end."""
    samples: list[Sample] = []  # appended by the pool's threads (list.append is atomic)
    errors: list[str] = []
    ops = (
        ("turn", 1 / rate, load.turn),
        ("search", 1 / rate, load.search),
        ("context", 1 / rate, load.context),
        ("ingest", 10.0, load.ingest),
        ("memory_write", 5.0, load.remember),
    )
    schedule = sorted(
        ((n * every, op, fn) for op, every, fn in ops for n in range(math.ceil(seconds / every))),
        key=lambda item: item[0],
    )

    def run(due: float, op: str, fn: Callable[[], None], origin: float) -> None:
        ok = True
        try:
            fn()
        except Exception as exc:  # counted, not raised: the soak goes on
            ok = False
            errors.append(f"{op}: {type(exc).__name__}: {exc}")  # list.append is atomic
        samples.append(Sample(due, op, (time.monotonic() - origin - due) * 1000, ok))

    assert stack.postgres is not None and stack.redis is not None and stack.redis.proc is not None
    roots = {child.name: child.pid for child in stack.children}
    roots |= {"postgres": stack.postgres.pid or 0, "valkey": stack.redis.proc.pid}
    snapshots: list[dict[str, dict[str, float | int | None]]] = []

    def on_window() -> None:
        stack.check_alive()
        snapshots.append(process_figures(roots))
        print(f"window {len(snapshots)}: {len(samples)} operations, {sum(not s.ok for s in samples)} errors")

    origin = time.monotonic()
    next_window = window_s
    with ThreadPoolExecutor(max_workers=64, thread_name_prefix="soak") as pool:
        for due, op, fn in schedule:
            while (now := time.monotonic() - origin) < due:
                if now >= next_window:
                    on_window()
                    next_window += window_s
                time.sleep(min(0.05, due - now))
            pool.submit(run, due, op, fn, origin)
        while time.monotonic() - origin < seconds:
            time.sleep(0.1)
    on_window()
    return samples, errors, snapshots


def process_figures(roots: Mapping[str, int]) -> dict[str, dict[str, float | int | None]]:
    """RSS (MB), file descriptors and TCP connections of each process with its children."""
    out: dict[str, dict[str, float | int | None]] = {}
    for name, pid in roots.items():
        rss = fds = conns = 0
        # Postgres serves on a Unix socket; its processes (one per connection) say what TCP cannot.
        tree: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        for proc in tree:
            try:
                rss += proc.memory_info().rss
                fds += proc.num_fds()
                conns += len(proc.net_connections(kind="tcp"))
            except psutil.Error:
                continue
        out[name] = {"rss_mb": megabytes(rss), "fds": fds, "connections": conns, "processes": len(tree)}
    return out


def windows(samples: list[Sample], window_s: float, count: int) -> list[dict[str, Any]]:
    out = []
    for index in range(count):
        inside = [s for s in samples if index * window_s <= s.at < (index + 1) * window_s]
        by_op = {op: [s.ms for s in inside if s.op == op] for op in sorted({s.op for s in inside})}
        out.append(
            {
                "window": index + 1,
                "operations": len(inside),
                "errors": sum(not s.ok for s in inside),
                "p95_ms": {op: distribution(values, (95,))["p95"] for op, values in by_op.items()},
            }
        )
    return out


def flatness(later: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per operation, the largest distance of a window's p95 from the median of the windows' p95 (0.1 = 10 %);
    None with fewer than two windows to compare."""
    out: dict[str, float | None] = {}
    for op in sorted({op for window in later for op in window["p95_ms"]}):
        values = [w["p95_ms"][op] for w in later if w["p95_ms"].get(op) is not None]
        middle = statistics.median(values) if values and len(later) > 1 else None
        out[op] = round(max(abs(v - middle) / middle for v in values), 3) if middle else None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.soak", __doc__, keep=True)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak (default 30)")
    parser.add_argument("--window-minutes", type=float, default=5.0, help="report window; the first is warm-up")
    parser.add_argument("--users", type=int, default=400, help="users the load is spread over (default 400)")
    parser.add_argument("--session-turns", type=int, default=SESSION_TURNS, help="turns per chat session")
    parser.add_argument("--history", type=int, default=HISTORY, help="earlier conversations each user starts with")
    args = parser.parse_args(argv)
    window_s, seconds = args.window_minutes * 60, args.minutes * 60
    if window_s <= 0 or seconds < 2 * window_s:
        parser.error("--minutes must be at least two windows (--window-minutes): the first is warm-up")

    # Every maintenance job every five minutes, so decay, consolidation, enrichment, reflection and cache
    # eviction fire during the run.
    schedules = {f"ENGRAM_JOB_{job.upper()}_SCHEDULE": f"{i}-59/5 * * * *" for i, job in enumerate(JOBS)}
    with BenchRun(keep=args.keep) as run:
        stack, api_key = run.stack("engram-soak-", up_workers(), beat=True, env=schedules)
        load = Load(stack.url, api_key, args.users, args.session_turns)
        run.callback(load.http.close)
        load.prepare(args.history)
        if not settle(stack.database_url, USER_PREFIX, SETTLE_TIMEOUT_S, units=True)[2]:
            raise BenchError(f"the users' history was not worked through within {SETTLE_TIMEOUT_S:.0f} s")
        # The sustainable rate from 60 s of closed-loop rounds, from twice as many clients as turn processes.
        calibration = calibrate(load, stack.worker_specs[0].concurrency * 2, 60.0, stack.database_url)
        if not calibration.settled or not calibration.rounds:
            raise BenchError(f"calibrating: {calibration.rounds} rounds, caught up: {calibration.settled}")
        rate = calibration.sustainable_per_s / 2
        print(f"sustainable {calibration.sustainable_per_s:.2f} rounds/s; soaking at {rate:.2f}", flush=True)
        samples, errors, snapshots = run_open_loop(load, rate, seconds, window_s, stack)

    table = windows(samples, window_s, int(seconds // window_s))
    warm, end = snapshots[0], snapshots[-1]
    growth = {
        name: round((end[name]["rss_mb"] or 0) / warm[name]["rss_mb"] - 1, 3)  # type: ignore[operator]
        for name in ENGRAM_PROCESSES
        if name in warm and warm[name]["rss_mb"]
    }
    flat = flatness(table[1:])
    failed = sum(not s.ok for s in samples)
    goals = {
        "zero_errors": failed == 0,
        "rss_growth_le_10pct": all(g <= RSS_GROWTH_GOAL for g in growth.values()),
        "p95_flat_within_20pct": all(f is not None and f <= P95_FLAT_GOAL for f in flat.values()),
    }
    summary = {
        "sustainable_rounds_per_s": round(calibration.sustainable_per_s, 2),
        "answered_rounds_per_s": round(calibration.answered_per_s, 2),
        "calibration_settle_s": round(calibration.settle_s, 1),
        "rounds_per_s": round(rate, 2),
        "operations": len(samples),
        "errors": failed,
        "error_examples": errors[:20],
        "windows": table,
        "processes": {name: {"warm": warm[name], "end": end[name]} for name in warm},
        "rss_growth": growth,
        "p95_flatness": flat,
        "goals": goals,
    }
    emit(outline(f"engram soak: {args.minutes:g} minutes, {args.users} users", summary), summary, args.json)
    return 0 if all(goals.values()) else 1


if __name__ == "__main__":
    raise SystemExit(run_main(main))
