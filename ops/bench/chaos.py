"""Chaos under load: worker processes, valkey and Postgres SIGKILLed (`--stall`: stopped) mid-turn under `engram
up`, then Postgres asked what was lost or done twice. docs/benchmarks.md, "Chaos under load", "Stalled dependencies".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import psutil
import psycopg
import redis

from ops.bench.harness import BenchRun, bench_parser, distribution, emit, env_setting, outline, rounded, run_main
from ops.bench.pipeline import Driver, kind_of, make_plans, pipeline_reply, query, settle, warm_up
from ops.bench.stack import BenchError, Child, bench_env, ready, wait_until
from ops.embedded import free_port
from ops.fake_llm import FakeLLM, FakeReply, Json
from shared.infra.config import Settings

USER_PREFIX = "chaos-"
POLL_S, HEAL_TIMEOUT_S, TURN_TIMEOUT_S, SEED = 0.2, 180.0, 600.0, 11
LOCK_PATTERN = "engram:lock:session:*"
# The stack's ENGRAM_REQUEST_TIME_LIMIT_SECONDS (its default): every request's latency is checked against it.
REQUEST_LIMIT_S = Settings.model_fields["request_time_limit_seconds"].default
# The fake model's latency range: chat calls long enough that kills land mid-turn; extraction and summaries.
CHAT_LATENCY_S, BACKGROUND_LATENCY_S = (2.0, 4.0), (0.3, 1.0)
PROCS = "run/procs"  # where `engram up` keeps its processes' PID files in the data dir
STALL_KINDS = ("stall-postgres", "stall-model", "stall-redis")
# A request answered this much after its limit still counts as in time: the client's clock includes the
# connect and the gateway's own queueing, which the limit (started when the app sees the request) does not.
LIMIT_GRACE_S = 1.0


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the postmaster and its backends), parent first."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    return []


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """SIGSTOP `pids` for the block; SIGCONT whatever happens (a stopped server outliving the run would
    ignore the SIGTERM that stops the stack)."""
    signal_all(pids, signal.SIGSTOP)
    try:
        yield
    finally:
        signal_all(pids, signal.SIGCONT)


def pid_alive(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


class EngramUp:
    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.data_dir, port = workdir, workdir / "data", free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = env | {
            "ENGRAM_DATA_DIR": str(self.data_dir),
            "ENGRAM_PORT": str(port),
            "ENGRAM_FLOWER_PORT": str(free_port()),
            "ENGRAM_UP_WORKER_METRICS_PORT": "0",  # free ports: two runs at once must not collide on 9808
            "PYTHONUNBUFFERED": "1",
        }
        # Its supervised processes get time to stop before the process group is killed.
        self.child = Child("engram-up", [sys.executable, "-m", "ops.cli", "up"], env, workdir, grace=90)

    def start(self) -> None:
        self.child.start()
        key = lambda: re.findall(r"API key\s+(egm_\S+)", self.child.tail(None))  # noqa: E731
        wait_until(lambda: bool(key()) or self.child.exit_code() is not None, 240, "engram up starting")
        self.child.check_alive()
        self.api_key = key()[0]
        services = json.loads((self.data_dir / "run" / "services.json").read_text())
        self.database_url, self.redis_url = services["database_url"], services["redis_url"]
        wait_until(lambda: ready(self.url), 120, "the gateway's /readyz answering 200")

    def pid(self, name: str) -> int | None:
        """The live process of `engram up`'s `name` ("worker-turns"…), "postgres" (postmaster) or "redis"."""
        files = {"postgres": "postgres/postmaster.pid", "redis": "valkey/valkey.pid"}
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            pid = int((self.data_dir / files.get(name, f"{PROCS}/{name}.pid")).read_text().split()[0])
            return pid if pid_alive(pid) else None
        return None

    def back(self, kind: str, killed: int) -> bool:
        """The server runs again (a new PID) and answers."""
        if self.pid(kind) in (None, killed):
            return False
        try:
            if kind == "postgres":
                return bool(query(self.database_url, "SELECT 1", timeout=0))
            with redis.Redis.from_url(self.redis_url, socket_connect_timeout=1, socket_timeout=2) as client:
                return bool(client.ping())
        except (psycopg.OperationalError, redis.RedisError):
            return False

    def stop(self) -> None:
        self.child.stop()
        # Whatever the stack's supervisor started and left behind must not outlive the benchmark.
        run_dir = str(self.data_dir / "run")
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("ENGRAM_SUPERVISOR_RUN_DIR") == run_dir:
                    proc.kill()


@dataclass
class Fault:
    kind: str  # worker | redis | postgres | stall-postgres | stall-redis | stall-model
    target: str  # which process
    pid: int
    # Epoch seconds (Postgres's clock, which stamps finished_at) just before the kill; for a stall, its SIGCONT.
    at: float
    affected: list[int]  # the turns running (at a worker kill: those whose lock the killed processes held)
    gateway_ready_s: float | None = None  # server answering (a stall: SIGCONT) -> the gateway's /readyz 200
    recovery_s: list[float] = field(default_factory=list)  # `at` -> each affected turn's finished_at


class Chaos:
    """Strikes the faults one after another at random moments of the load, each once some turn is running and
    the previous fault has healed, in a thread of its own."""

    def __init__(self, stack: EngramUp, driver: Driver, args: argparse.Namespace, fake: FakeLLM) -> None:
        self.stack, self.driver, self.args, self.fake = stack, driver, args, fake
        self.rng = random.Random(SEED + 1)
        self.plan = ["worker"] * args.worker_kills + ["redis"] * args.redis_kills + ["postgres"] * args.postgres_kills
        self.plan += list(STALL_KINDS) if args.stall else []
        self.rng.shuffle(self.plan)
        self.faults: list[Fault] = []

    def run(self) -> None:
        # Spread the faults over the expected length of the load.
        expected = self.args.sessions * self.args.turns * sum(CHAT_LATENCY_S) / 2
        gap = expected / max(1, self.args.turn_concurrency) / (len(self.plan) + 1)
        running = "SELECT 1 FROM turns WHERE status = 'running' LIMIT 1"
        for kind in self.plan:
            time.sleep(self.rng.uniform(0.5, 1.5) * gap if self.driver.running() else 0)
            # Land mid-turn: wait (while the load lasts) until some turn is running.
            while self.driver.running() and not query(self.stack.database_url, running):
                time.sleep(POLL_S)
            self.stack.child.check_alive()
            fault = self._strike(kind)
            self.faults.append(fault)
            self._heal(fault)

    def _snapshot(self) -> tuple[float, dict[int, int]]:
        """Postgres's clock now, and the running turns (turn id -> session id)."""
        rows = query(
            self.stack.database_url,
            """SELECT extract(epoch FROM clock_timestamp())::float8 AS at,
                      coalesce((SELECT json_object_agg(id, session_id) FROM turns WHERE status = 'running'), '{}')
                          AS running""",
        )
        return float(rows[0]["at"]), {int(k): int(v) for k, v in rows[0]["running"].items()}

    def _worker_target(self) -> tuple[str, int]:
        """A turn holder (a worker-turns pool process holding a session lock) most of the time, else a
        worker-turns or worker-background main process or a background pool process."""
        draw = self.rng.random()
        holders = sorted(set(self._lock_holders().values())) if draw < 0.6 else []
        if holders:
            return "worker-turns pool process (turn holder)", self.rng.choice(holders)
        if draw < 0.8 and (pid := self.stack.pid("worker-turns")):
            return "worker-turns main process", pid
        if (pid := self.stack.pid("worker-background")) is None:
            raise BenchError("no worker process to kill")
        with contextlib.suppress(psutil.Error):
            if (pool := psutil.Process(pid).children()) and self.rng.random() < 0.5:
                return "worker-background pool process", self.rng.choice(pool).pid
        return "worker-background main process", pid

    def _lock_holders(self) -> dict[int, int]:
        """Session id -> PID of the live process holding its lock (the PID is in the lock's token)."""
        holders: dict[int, int] = {}
        url = self.stack.redis_url
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, decode_responses=True)
        with contextlib.suppress(redis.RedisError), client:
            for key in client.scan_iter(LOCK_PATTERN, count=500):
                parts = str(client.get(key) or "").split("|")
                if len(parts) == 6 and parts[3].isdigit() and pid_alive(int(parts[3])):
                    holders[int(key.rsplit(":", 1)[1])] = int(parts[3])
        return holders

    def _strike(self, kind: str) -> Fault:
        """SIGKILL a worker process or a server, or (a stall) freeze a dependency for --stall-seconds."""
        server = kind.removeprefix("stall-")
        if kind == "worker":
            target, pid = self._worker_target()
            killed, holders = {pid, *process_tree(pid)}, self._lock_holders()
        else:
            target = {"redis": "valkey", "postgres": "postgres", "model": "fake model"}[server]
            if (found := os.getpid() if server == "model" else self.stack.pid(server)) is None:
                raise BenchError(f"{server} is not running")
            pid = found
        at, running = self._snapshot()
        affected = sorted(t for t, session in running.items() if kind != "worker" or holders.get(session) in killed)
        if kind not in STALL_KINDS:
            signal_all([pid], signal.SIGKILL)
            log(f"SIGKILL {target} (pid {pid}); {len(running)} turns running, {len(affected)} hit")
            return Fault(kind, target, pid, at, affected)
        log(f"SIGSTOP {target} for {self.args.stall_seconds:g} s; {len(running)} turns running")
        if server == "model":
            self.fake.freeze(self.args.stall_seconds)
        with stopped([] if server == "model" else process_tree(pid) if server == "postgres" else [pid]):
            time.sleep(self.args.stall_seconds)
        self.fake.thaw()
        log(f"SIGCONT {target}")
        # The system clock is Postgres's (same machine); Postgres may still be catching up.
        return Fault(kind, target, pid, time.time(), affected)

    def _heal(self, fault: Fault) -> None:
        """Wait for the killed server and the gateway to be back, so the next fault hits a healthy system."""
        if fault.kind in ("redis", "postgres"):
            back = lambda: self.stack.back(fault.kind, fault.pid)  # noqa: E731
            wait_until(back, HEAL_TIMEOUT_S, f"{fault.target} coming back")
        back_at = time.monotonic()
        wait_until(lambda: ready(self.stack.url), HEAL_TIMEOUT_S, "the gateway's /readyz answering 200")
        if fault.kind != "worker":
            fault.gateway_ready_s = round(time.monotonic() - back_at, 2)


def log(text: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {text}", file=sys.stderr)


def audit(database_url: str, planned: int, sent_tokens: set[str]) -> dict[str, int]:
    p = {"p": USER_PREFIX + "%"}
    turns = query(
        database_url,
        """SELECT t.id, t.status,
                  (SELECT count(*) FROM session_messages m WHERE m.turn_id = t.id AND m.role = 'user') AS users,
                  (SELECT count(*) FROM session_messages m WHERE m.turn_id = t.id AND m.role = 'assistant') AS replies
           FROM turns t JOIN users u ON u.id = t.user_id WHERE u.external_id LIKE %(p)s""",
        p,
    )
    done = [t for t in turns if t["status"] == "done"]
    memories = query(
        database_url,
        """SELECT m.user_id, m.namespace, m.key, m.value FROM memories m JOIN users u ON u.id = m.user_id
           WHERE u.external_id LIKE %(p)s AND m.valid_until IS NULL""",
        p,
    )
    by_key = Counter((m["user_id"], m["namespace"], m["key"]) for m in memories)
    by_value = Counter((m["user_id"], m["namespace"], m["value"]) for m in memories)
    keys = {m["key"] for m in memories}
    return {
        "turns_done": len(done),
        "failed_turns": sum(1 for t in turns if t["status"] == "failed"),
        "lost_turns": planned - len(done),
        "duplicate_replies": sum(max(0, int(t["replies"]) - 1) for t in turns),
        "missing_replies": sum(1 for t in done if int(t["replies"]) == 0),
        "duplicate_user_messages": sum(max(0, int(t["users"]) - 1) for t in turns),
        "duplicate_memories": sum(n - 1 for n in by_key.values() if n > 1)
        + sum(n - 1 for n in by_value.values() if n > 1),
        "memories": len(memories),
        # Extraction turns "ref pqX about …" into the memory note/pqX: one per turn the user sent.
        "missing_memories": sum(1 for token in sent_tokens if f"note/{token}" not in keys),
    }


def recovery(database_url: str, faults: list[Fault]) -> list[float]:
    """Fault -> each affected turn's finished_at (a lost turn is counted as lost, not here)."""
    ids = sorted({turn_id for fault in faults for turn_id in fault.affected})
    sql = "SELECT id, extract(epoch FROM finished_at)::float8 AS finished FROM turns WHERE id = ANY(%s)"
    finished = {int(r["id"]): float(r["finished"]) for r in query(database_url, sql, (ids,)) if r["finished"]}
    for fault in faults:
        # A turn that finished while the dependency was stopped did not wait for it to go on.
        floor = 0.0 if fault.kind in STALL_KINDS else -math.inf
        fault.recovery_s = [round(max(finished[t] - fault.at, floor), 2) for t in fault.affected if t in finished]
    return [took for fault in faults for took in fault.recovery_s]


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.chaos", __doc__, keep=True)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5, help="turns per session")
    kills = " (default: %s, or 0 with --stall)"
    parser.add_argument("--worker-kills", type=int, default=None, help="worker SIGKILLs" + kills % 5)
    parser.add_argument("--redis-kills", type=int, default=None, help="valkey SIGKILLs" + kills % 2)
    parser.add_argument("--postgres-kills", type=int, default=None, help="Postgres SIGKILLs" + kills % 2)
    parser.add_argument("--stall", action="store_true", help="stall Postgres, valkey and the fake model in turn")
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument("--turn-concurrency", type=int, default=8, help="ENGRAM_TURN_WORKER_CONCURRENCY")
    parser.add_argument("--env", type=env_setting, action="append", default=[], help="ENGRAM_KEY=VALUE (repeat)")
    parser.add_argument("--settle-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1 or args.stall_seconds <= 0:
        parser.error("--sessions and --turns must be at least 1, --stall-seconds above 0")
    for name, default in (("worker_kills", 5), ("redis_kills", 2), ("postgres_kills", 2)):
        if getattr(args, name) is None:
            setattr(args, name, 0 if args.stall else default)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with BenchRun(keep=args.keep) as run:
        fake = run.enter_context(FakeLLM())
        rng = random.Random(SEED)

        def reply(body: Json) -> FakeReply:
            """pipeline's fake replies after a random latency, drawn on the fake's one event loop thread (no lock)."""
            delay = rng.uniform(*(CHAT_LATENCY_S if kind_of(body) == "chat" else BACKGROUND_LATENCY_S))
            return replace(pipeline_reply(body), delay_s=delay)

        fake.default = reply
        # With no rate limit (the benchmark measures recovery) and the fake's embeddings (no model in every process).
        env = bench_env(fake.anthropic_base_url) | {
            "ENGRAM_AUTO_MEMORY": "true",
            "ENGRAM_TURN_WORKER_CONCURRENCY": str(args.turn_concurrency),
            "ENGRAM_EMBEDDING_PROVIDER": "openai",
            "ENGRAM_EMBEDDING_BASE_URL": fake.openai_base_url,
            "ENGRAM_EMBEDDING_API_KEY": "bench-key",
        }
        env.update(args.env)
        stack = EngramUp(run.workdir("engram-chaos-"), env)
        run.callback(stack.stop)
        print(f"starting engram up in {stack.workdir}", file=sys.stderr)
        stack.start()
        warm_up(stack.url, stack.api_key, make_plans(2, 1, "warmup-", 0))
        plans = make_plans(args.sessions, args.turns, USER_PREFIX, SEED)
        driver = Driver(stack.url, stack.api_key, plans, TURN_TIMEOUT_S, REQUEST_LIMIT_S)
        chaos = Chaos(stack, driver, args, fake)
        print(f"load: {args.sessions} sessions x {args.turns} turns; faults: {', '.join(chaos.plan)}", file=sys.stderr)
        started = time.monotonic()
        driver.start()
        try:
            chaos.run()
        except BaseException:
            driver.abort.set()
            raise
        driver.wait(stack.child.check_alive)
        load_s = time.monotonic() - started
        print(f"load done in {load_s:.0f} s; settling", file=sys.stderr)
        _, state, settled = settle(stack.database_url, USER_PREFIX, args.settle_timeout)
        stack.child.check_alive()
        records = driver.records
        checks = audit(stack.database_url, len(plans) * args.turns, {r.token for r in records if r.turn_id})
        recovered = distribution(recovery(stack.database_url, chaos.faults), (50, 95))
        log = stack.child.tail(None)
        kinds = Counter(f.kind for f in chaos.faults)
        result = {
            "turns_sent": sum(1 for r in records if r.turn_id is not None),
            **checks,
            "settled": settled,
            **state,
            "kills": kinds["worker"],
            "redis_kills": kinds["redis"],
            "postgres_kills": kinds["postgres"],
            # `engram up` logs each embedded server it brought back.
            "redis_restarts": len(re.findall(r"embedded server restarted.*service=valkey\b", log)),
            "postgres_restarts": len(re.findall(r"embedded server restarted.*service=postgres\b", log)),
            "stall_s": args.stall_seconds if args.stall else None,
            "recovery_samples": recovered.pop("n"),
            **{f"recovery_{name}_s": value for name, value in recovered.items()},
            "requests": len(driver.requests),
            "requests_over_limit": sum(over > LIMIT_GRACE_S for over, _ in driver.requests),
            "worst_request_excess_s": rounded(max((over for over, _ in driver.requests), default=None), 2),
            "request_outcomes": dict(Counter(outcome for _, outcome in driver.requests).most_common()),
            "load_s": round(load_s, 1),
            "llm_calls": dict(Counter(kind_of(r.body) for r in fake.requests if r.path == "/v1/messages")),
            "faults": [asdict(f) | {"affected": len(f.affected)} for f in chaos.faults],
            "turn_problems": [asdict(r) for r in records if r.status != "done"][:20],
        }
        emit(outline(f"chaos: {args.sessions} sessions x {args.turns} turns", result), result, args.json)
        return 0


if __name__ == "__main__":
    sys.exit(main())
