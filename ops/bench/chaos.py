"""Chaos under load: many sessions chat through the gateway while worker processes, Redis and
Postgres are SIGKILLed at random moments; then Postgres is asked whether anything was lost or
done twice.

    python -m ops.bench.chaos [--sessions 40] [--turns 5] [--external] [--stall] [--json]

The stack is `engram up` as a user runs it, in a temporary data dir, with ENGRAM_AUTO_MEMORY on.
By default its Postgres and valkey are the embedded ones, which `engram up` must bring back by
itself after each kill. With `--external` the benchmark runs its own Postgres and valkey and hands
them to `engram up` through ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL (as external servers), and
restarts them itself after each kill (`--outage-s` later).

The model is the fake Anthropic server of ops/fake_llm.py, in this process: a chat call answers
(an echo) after 2-4 s (`--llm-latency`), so kills land mid-turn; extraction calls get one memory
per user message that carries a reference token (as in ops/bench/pipeline.py), after
`--background-latency`. Embeddings come from the fake's OpenAI-compatible endpoint (`--embeddings
local` uses the bundled model instead).

Each session is one user sending its turns one after another, waiting for each reply, as a chat
client would: a 503 or a refused connection is retried (the POST with its Idempotency-Key).

Faults, in a random order at random moments while turns run (each waits until some turn is
running, and until the previous fault has healed):
- worker: SIGKILL of a worker process: a `worker-turns` pool process that holds a session lock
  (so it is mid-turn), the `worker-turns` main process (its pool dies with it), or a
  `worker-background` process;
- redis: SIGKILL of valkey;
- postgres: SIGKILL of the postmaster.

With `--stall` the faults are stalls instead (unless kills are asked for too): Postgres (the postmaster and
every backend) and valkey get SIGSTOP, each in turn, for `--stall-seconds` (30), then SIGCONT; the fake
model stops answering for as long (ops/bench/stalls.py). Every gateway request's latency is checked
against its documented limit (`--request-limit`, the stack's ENGRAM_REQUEST_TIME_LIMIT_SECONDS, plus a
long poll's wait); a stall's recovery is measured from its SIGCONT.

Then it waits for the system to settle (no open turn, every user message mined, every memory
embedded) and checks from Postgres: every turn done exactly once (one assistant reply and one user
message per turn), every user message mined, every memory once (no two active memories with the
same key or the same value in a namespace), embeddings complete, and each reference token's
memory present.

Recovery is measured per affected turn, from the fault to the turn's `finished_at`. Affected: for a
Redis or Postgres kill, every turn running at that moment; for a worker kill, the running turns
whose session lock the killed process (or a pool process of a killed main process) held, read from
the lock tokens just before the kill. Queued turns are not counted: their wait is mostly the queue,
not the fault.

The last line with --json:
{"turns_sent", "turns_done", "lost_turns", "duplicate_replies", "duplicate_memories",
 "unmined_messages", "kills", "redis_restarts", "postgres_restarts", "settle_s", "recovery_p95_s",
 "stalls", "requests", "requests_over_limit", "worst_request_excess_s", ...}
`lost_turns` counts every planned turn that is not done (never accepted, failed or still open);
`kills` counts worker processes killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import redis
from psycopg.rows import dict_row

from ops.bench.harness import BenchError, BenchRun, backlog_sql, bench_parser, emit, percentile, rounded, run_main
from ops.bench.pipeline import kind_of, pipeline_reply, user_text
from ops.bench.stack import Child, bench_env
from ops.bench.stalls import STALL_KINDS, RequestLog, outcome_of, process_tree, stopped
from ops.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from ops.fake_llm import FakeLLM, FakeReply, Json
from shared.infra.config import Settings

USER_PREFIX = "chaos-"
POLL_S = 0.2
HEAL_TIMEOUT_S = 180.0
# The client's hang detector: a request not answered this long after its documented limit has hung.
HANG_MARGIN_S = 30.0
# A turn's long poll (GET /v1/turns/{id}?wait=…); below ENGRAM_MAX_WAIT_SECONDS.
POLL_WAIT_S = 20.0
LOCK_PATTERN = "engram:lock:session:*"
# Where `engram up` keeps its embedded servers and PID files inside the data dir.
PGDATA, VALKEY_DIR, PROCS = "postgres", "valkey", "run/procs"


# ---------------------------------------------------------------------------------------------------
# The fake model


class LatencyModel:
    """Replies as ops/bench/pipeline.py's fake does, each after a random latency: chat calls take
    `chat` seconds (a range), background calls (extraction, summaries) `background`."""

    def __init__(self, chat: tuple[float, float], background: tuple[float, float], seed: int) -> None:
        self.chat = chat
        self.background = background
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def __call__(self, body: Json) -> FakeReply:
        kind = kind_of(body)
        low, high = self.chat if kind == "chat" else self.background
        with self.lock:
            delay = self.rng.uniform(low, high)
            self.calls[kind] += 1
        reply = pipeline_reply(body)
        reply.delay_s = delay
        return reply


# ---------------------------------------------------------------------------------------------------
# Postgres and Redis, as the benchmark sees them


def query(database_url: str, sql: str, params: Any = None, timeout: float = HEAL_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run one statement on a fresh connection, retrying while Postgres is down (it is killed here)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(database_url, autocommit=True, row_factory=dict_row, connect_timeout=3) as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def postgres_answers(database_url: str) -> bool:
    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def redis_answers(redis_url: str) -> bool:
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def wait_until(check: Callable[[], bool], timeout: float, what: str, abort: threading.Event | None = None) -> float:
    """Poll `check` until it holds; return the seconds it took."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise BenchError(f"{what} did not happen within {timeout:.0f} s")
        if abort is not None and abort.is_set():
            raise BenchError(f"aborted while waiting for {what}")
        time.sleep(POLL_S)
    return time.monotonic() - started


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------------------------------
# The stack: `engram up`


class EngramUp:
    """`engram up` in `workdir`, its output in a log file; with `external`, Postgres and valkey are
    this object's own servers, given to `engram up` as external ones."""

    def __init__(self, workdir: Path, env: dict[str, str], *, external: bool) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.env = env
        self.external = external
        self.child: Child | None = None
        self.ext_postgres: EmbeddedPostgres | None = None
        self.ext_redis: EmbeddedRedis | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = ""
        self.redis_url = ""
        self.api_key = ""

    def start(self, timeout: float = 240) -> None:
        env = dict(self.env)
        env.update(
            {
                "ENGRAM_DATA_DIR": str(self.data_dir),
                "ENGRAM_PORT": str(self.port),
                "ENGRAM_FLOWER_PORT": str(free_port()),
                "ENGRAM_UP_WORKER_METRICS_PORT": "0",  # free ports: two runs at once must not collide on 9808
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.external:
            self.ext_postgres = EmbeddedPostgres(self.workdir / "ext-postgres")
            env["ENGRAM_DATABASE_URL"] = self.ext_postgres.start()
            self.ext_redis = EmbeddedRedis(self.workdir / "ext-valkey")
            env["ENGRAM_REDIS_URL"] = self.ext_redis.start()
        # Its supervised processes get time to stop before the process group is killed.
        self.child = Child("engram-up", [sys.executable, "-m", "ops.cli", "up"], env, self.workdir, grace=90).start()
        deadline = time.monotonic() + timeout
        while not (match := re.search(r"API key\s+(egm_\S+)", self.log_text())):
            self.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"engram up did not start within {timeout:.0f} s:\n{self.log_text()[-3000:]}")
            time.sleep(POLL_S)
        self.api_key = match.group(1)
        services = json.loads((self.data_dir / "run" / "services.json").read_text())
        self.database_url, self.redis_url = services["database_url"], services["redis_url"]

    def log_text(self) -> str:
        return self.child.tail(None) if self.child is not None else ""

    def check_alive(self) -> None:
        if self.child is not None:
            self.child.check_alive()

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    # -- what gets killed ----------------------------------------------------------------------

    def process_pid(self, name: str) -> int | None:
        return read_pid(self.data_dir / PROCS / f"{name}.pid")

    def pool_pids(self, name: str) -> list[int]:
        pid = self.process_pid(name)
        if pid is None:
            return []
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.NoSuchProcess:
            return []

    def postgres_pid(self) -> int | None:
        pgdata = self.ext_postgres.pgdata if self.ext_postgres else self.data_dir / PGDATA
        pid = read_pid(pgdata / "postmaster.pid")
        return pid if pid_alive(pid) else None

    def redis_pid(self) -> int | None:
        if self.ext_redis is not None:
            return self.ext_redis.proc.pid if self.ext_redis.proc else None
        pid = read_pid(self.data_dir / VALKEY_DIR / "valkey.pid")
        return pid if pid_alive(pid) else None

    def restart_external(self, kind: str) -> None:
        if kind == "postgres" and self.ext_postgres is not None:
            self.ext_postgres.restart()
        elif kind == "redis" and self.ext_redis is not None:
            self.ext_redis.restart()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
        # Whatever the stack's supervisor started and left behind must not outlive the benchmark.
        run_dir = str(self.data_dir / "run")
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("ENGRAM_SUPERVISOR_RUN_DIR") == run_dir:
                    proc.kill()
        for service in (self.ext_redis, self.ext_postgres):
            if service is not None:
                try:
                    service.stop()
                except Exception as exc:  # keep stopping the rest
                    print(f"warning: could not stop {type(service).__name__}: {exc}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# The load


@dataclass
class TurnRecord:
    session: int
    number: int
    token: str
    turn_id: int | None = None
    status: str = "not sent"
    error: str | None = None
    retried_503: int = 0
    retried_errors: int = 0


@dataclass
class Plan:
    index: int
    user_id: str
    session_key: str
    texts: list[str]
    tokens: list[str]


def make_plans(sessions: int, turns: int, run_id: str, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    plans = []
    for index in range(sessions):
        # One word for full-text search, unique in the run: "pq" + session + turn + salt (see pipeline.py).
        tokens = [f"pq{index % 1000:03d}{n % 100:02d}{rng.randrange(16**4):04x}" for n in range(turns)]
        plans.append(
            Plan(
                index,
                f"{USER_PREFIX}{run_id}-{index:03d}",
                f"chaos-{index:03d}",
                [user_text(rng, t) for t in tokens],
                tokens,
            )
        )
    return plans


class Driver:
    """One thread per session; each sends its turns one after another and waits for every reply."""

    def __init__(
        self, url: str, api_key: str, plans: list[Plan], turn_timeout: float, request_limit: float = 0.0
    ) -> None:
        self.url = url
        # ENGRAM_REQUEST_TIME_LIMIT_SECONDS of the stack (0: none; then only the hang detector applies).
        self.request_limit = request_limit
        self.request_log = RequestLog()
        self.api_key = api_key
        self.plans = plans
        self.turn_timeout = turn_timeout
        self.records: list[TurnRecord] = []
        self.lock = threading.Lock()
        self.abort = threading.Event()
        self.done = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for plan in self.plans:
            thread = threading.Thread(target=self._session, args=(plan,), name=f"session-{plan.index}", daemon=True)
            self.threads.append(thread)
            thread.start()
        threading.Thread(target=self._join, name="driver", daemon=True).start()

    def _join(self) -> None:
        for thread in self.threads:
            thread.join()
        self.done.set()

    def _session(self, plan: Plan) -> None:
        with httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=(self.request_limit or POLL_WAIT_S) + POLL_WAIT_S + HANG_MARGIN_S,
        ) as http:
            for number, text in enumerate(plan.texts):
                record = TurnRecord(plan.index, number, plan.tokens[number])
                with self.lock:
                    self.records.append(record)
                self._run_turn(http, plan, text, record)
                if record.status != "done" or self.abort.is_set():
                    return  # later turns would queue behind one that is not done

    def _run_turn(self, http: httpx.Client, plan: Plan, text: str, record: TurnRecord) -> None:
        deadline = time.monotonic() + self.turn_timeout
        key = uuid.uuid4().hex
        body = {"user_id": plan.user_id, "text": text}
        while record.turn_id is None:
            response = self._request(
                record,
                deadline,
                "POST turn",
                0.0,
                lambda: http.post(
                    f"/v1/sessions/{plan.session_key}/turns", json=body, headers={"Idempotency-Key": key}
                ),
            )
            if response is None:
                return
            if response.status_code >= 400:
                record.status, record.error = "refused", f"{response.status_code}: {response.text[:200]}"
                return
            record.turn_id = int(response.json()["turn_id"])
        turn_id = record.turn_id
        while True:
            response = self._request(
                record,
                deadline,
                "GET turn?wait",
                POLL_WAIT_S,
                lambda: http.get(f"/v1/turns/{turn_id}", params={"wait": POLL_WAIT_S}),
            )
            if response is None:
                return
            turn = response.json()
            if turn["status"] in ("done", "failed"):
                record.status, record.error = turn["status"], turn.get("error")
                return

    def _request(
        self, record: TurnRecord, deadline: float, what: str, waits: float, send: Callable[[], httpx.Response]
    ) -> httpx.Response | None:
        """`send` until it is answered with something other than 503; None past the deadline. Each try's
        latency is logged against its limit (the gateway's, plus the `waits` the request asks for)."""
        limit = self.request_limit + waits if self.request_limit else float("inf")
        while not self.abort.is_set():
            if time.monotonic() > deadline:
                record.status = "timeout"
                record.error = f"not done after {self.turn_timeout:.0f} s"
                return None
            sent = time.monotonic()
            try:
                response = send()
            except httpx.HTTPError as exc:
                outcome = "client timeout (hang)" if isinstance(exc, httpx.TimeoutException) else "connection error"
                self.request_log.record(what, time.monotonic() - sent, limit, outcome)
                record.retried_errors += 1
                record.error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)
                continue
            self.request_log.record(
                what, time.monotonic() - sent, limit, outcome_of(response.status_code, response.json)
            )
            if response.status_code == 503:
                record.retried_503 += 1
                time.sleep(0.5)
                continue
            return response
        record.status = "aborted"
        return None

    def running(self) -> bool:
        return not self.done.is_set()


# ---------------------------------------------------------------------------------------------------
# The faults


@dataclass
class Fault:
    kind: str  # worker | redis | postgres | stall-postgres | stall-redis | stall-model
    target: str  # which process
    pid: int
    # Epoch seconds (Postgres's clock, which stamps finished_at) just before the kill; for a stall, the
    # moment it ended (SIGCONT): recovery is what follows the fault, not the stall's own length.
    at: float
    running: int  # turns running at that moment
    # The turns the kill hit: for Redis and Postgres every running turn; for a worker, the running
    # turns whose session lock the killed process (or, for a main process, one of its pool) held.
    affected: list[int]
    during_load: bool
    back_s: float | None = None  # redis/postgres: kill -> answering again
    gateway_ready_s: float | None = None  # server answering -> the gateway's /readyz 200
    recovery_s: list[float] = field(default_factory=list)
    stalled_s: float | None = None  # a stall: SIGSTOP -> SIGCONT


class Chaos:
    def __init__(self, stack: EngramUp, driver: Driver, args: argparse.Namespace, fake: FakeLLM | None = None) -> None:
        self.stack = stack
        self.driver = driver
        self.args = args
        self.fake = fake
        self.rng = random.Random(args.seed + 1)
        kinds = ["worker"] * args.worker_kills + ["redis"] * args.redis_kills + ["postgres"] * args.postgres_kills
        kinds += [f"stall-{name}" for name in args.stall_only] if args.stall else []
        self.rng.shuffle(kinds)
        self.plan = kinds
        self.faults: list[Fault] = []
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            # Spread the faults over the expected length of the load.
            expected = self.args.sessions * self.args.turns * sum(self.args.llm_latency) / 2
            expected /= max(1, self.args.turn_concurrency)
            gap = expected / (len(self.plan) + 1)
            for kind in self.plan:
                if self.driver.abort.wait(self.rng.uniform(0.5, 1.5) * gap if self.driver.running() else 0):
                    return
                # Land mid-turn: wait (while the load lasts) until some turn is running.
                while self.driver.running() and not self._running_turns():
                    if self.driver.abort.wait(POLL_S):
                        return
                fault = self._strike(kind)
                self.faults.append(fault)
                self._heal(fault)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.finished.set()

    def _running_turns(self) -> bool:
        rows = query(self.stack.database_url, "SELECT 1 FROM turns WHERE status = 'running' LIMIT 1")
        return bool(rows)

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
        if draw < 0.6:
            holders = sorted(set(self._lock_holders().values()))
            if holders:
                return "worker-turns pool process (turn holder)", self.rng.choice(holders)
        if draw < 0.8:
            pid = self.stack.process_pid("worker-turns")
            if pid_alive(pid):
                assert pid is not None
                return "worker-turns main process", pid
        pids = self.stack.pool_pids("worker-background")
        if pids and self.rng.random() < 0.5:
            return "worker-background pool process", self.rng.choice(pids)
        pid = self.stack.process_pid("worker-background")
        if not pid_alive(pid):
            raise BenchError("no worker process to kill")
        assert pid is not None
        return "worker-background main process", pid

    def _lock_holders(self) -> dict[int, int]:
        """Session id -> PID of the live process holding its lock (the PID is in the lock's token)."""
        client = redis.Redis.from_url(self.stack.redis_url, socket_connect_timeout=2, socket_timeout=5)
        try:
            holders = {}
            for name in client.scan_iter(LOCK_PATTERN, count=500):
                token = client.get(name)
                text = token.decode(errors="replace") if isinstance(token, bytes) else str(token or "")
                parts = text.split("|")
                if len(parts) == 6 and parts[3].isdigit() and pid_alive(int(parts[3])):
                    key = name.decode() if isinstance(name, bytes) else str(name)
                    holders[int(key.rsplit(":", 1)[1])] = int(parts[3])
            return holders
        except redis.RedisError:
            return {}
        finally:
            client.close()

    def _stall(self, kind: str) -> Fault:
        """Freeze a dependency for --stall-seconds under load, then let it go on."""
        if kind == "stall-model":
            if self.fake is None:
                raise BenchError("no fake model to stall")
            target, pid, pids = "fake model", os.getpid(), []
        elif kind == "stall-redis":
            found = self.stack.redis_pid()
            if found is None:
                raise BenchError("valkey is not running")
            target, pid, pids = "valkey", found, [found]
        else:
            found = self.stack.postgres_pid()
            if found is None:
                raise BenchError("Postgres is not running")
            target, pid, pids = "postgres (postmaster and backends)", found, process_tree(found)
        _, running = self._snapshot()
        print(
            f"  {time.strftime('%H:%M:%S')} SIGSTOP {target} for {self.args.stall_seconds:g} s; "
            f"{len(running)} turns running",
            file=sys.stderr,
        )
        stopped_at = time.monotonic()
        if kind == "stall-model":
            assert self.fake is not None
            self.fake.freeze(self.args.stall_seconds)
            try:
                self.driver.abort.wait(self.args.stall_seconds)
            finally:
                self.fake.thaw()
        else:
            with stopped(pids):
                self.driver.abort.wait(self.args.stall_seconds)
        stalled = round(time.monotonic() - stopped_at, 2)
        print(f"  {time.strftime('%H:%M:%S')} SIGCONT {target}", file=sys.stderr)
        # The system clock is Postgres's (same machine); Postgres may still be catching up.
        fault = Fault(kind, target, pid, time.time(), len(running), sorted(running), self.driver.running())
        fault.stalled_s = stalled
        return fault

    def _strike(self, kind: str) -> Fault:
        if kind in STALL_KINDS:
            return self._stall(kind)
        if kind == "worker":
            target, pid = self._worker_target()
        elif kind == "redis":
            found = self.stack.redis_pid()
            if found is None:
                raise BenchError("valkey is not running")
            target, pid = "valkey", found
        else:
            found = self.stack.postgres_pid()
            if found is None:
                raise BenchError("Postgres is not running")
            target, pid = "postgres (postmaster)", found
        if kind == "worker":
            killed = {pid}
            with contextlib.suppress(psutil.Error):
                killed |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
            holders = self._lock_holders()
        at, running = self._snapshot()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if kind == "worker":
            affected = [turn for turn, session in running.items() if holders.get(session) in killed]
        else:
            affected = list(running)
        fault = Fault(kind, target, pid, at, len(running), sorted(affected), during_load=self.driver.running())
        print(
            f"  {time.strftime('%H:%M:%S')} SIGKILL {target} (pid {pid}); {len(running)} turns running, "
            f"{len(affected)} hit",
            file=sys.stderr,
        )
        return fault

    def _heal(self, fault: Fault) -> None:
        """Wait until the killed server is back (restarting it ourselves when it is external) and the
        gateway is ready again, so the next fault hits a healthy system."""
        started = time.monotonic()
        if fault.kind in ("redis", "postgres"):
            if self.stack.external:
                time.sleep(self.args.outage_s)
                self.stack.restart_external(fault.kind)

            def back() -> bool:
                if fault.kind == "redis":
                    pid = self.stack.redis_pid()
                    return pid is not None and pid != fault.pid and redis_answers(self.stack.redis_url)
                pid = self.stack.postgres_pid()
                return pid is not None and pid != fault.pid and postgres_answers(self.stack.database_url)

            wait_until(back, HEAL_TIMEOUT_S, f"{fault.target} coming back", self.driver.abort)
            fault.back_s = round(time.monotonic() - started, 2)
        back_at = time.monotonic()
        wait_until(self.stack.ready, HEAL_TIMEOUT_S, "the gateway's /readyz answering 200", self.driver.abort)
        if fault.kind in ("redis", "postgres", *STALL_KINDS):
            fault.gateway_ready_s = round(time.monotonic() - back_at, 2)


# ---------------------------------------------------------------------------------------------------
# Settling and the checks


def settle_state(database_url: str) -> dict[str, int]:
    rows = query(database_url, backlog_sql(units=False), {"p": USER_PREFIX + "%"})
    return {key: int(value) for key, value in rows[0].items()}


def settle(database_url: str, timeout: float) -> tuple[float, dict[str, int], bool]:
    started = time.monotonic()
    while True:
        state = settle_state(database_url)
        if not any(state.values()):
            return time.monotonic() - started, state, True
        if time.monotonic() - started > timeout:
            return time.monotonic() - started, state, False
        time.sleep(1.0)


def audit(database_url: str, plans: Sequence[Plan], sent_tokens: set[str]) -> dict[str, int]:
    """Exactly-once checks, from Postgres."""
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
    planned = sum(len(plan.tokens) for plan in plans)
    return {
        "turns_planned": planned,
        "turn_rows": len(turns),
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
    ids = sorted({turn_id for fault in faults for turn_id in fault.affected})
    rows = query(
        database_url,
        "SELECT id, extract(epoch FROM finished_at)::float8 AS finished FROM turns WHERE id = ANY(%s)",
        (ids,),
    )
    finished = {int(r["id"]): r["finished"] for r in rows}
    samples: list[float] = []
    for fault in faults:
        for turn_id in fault.affected:
            if finished.get(turn_id) is not None:  # a lost turn is counted as lost, not here
                took = float(finished[turn_id]) - fault.at
                # A turn that finished while the dependency was stopped did not wait for it to go on.
                fault.recovery_s.append(round(max(took, 0.0) if fault.kind in STALL_KINDS else took, 2))
        samples.extend(fault.recovery_s)
    return samples


# ---------------------------------------------------------------------------------------------------
# Main


def parse_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    values = (float(low), float(high or low))
    if values[0] < 0 or values[1] < values[0]:
        raise argparse.ArgumentTypeError(f"{text!r}: want LOW,HIGH seconds with 0 <= LOW <= HIGH")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.chaos", __doc__, keep=True)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5, help="turns per session")
    kills = " (default: %s, or 0 with --stall)"
    parser.add_argument("--worker-kills", type=int, default=None, help="worker SIGKILLs" + kills % 5)
    parser.add_argument("--redis-kills", type=int, default=None, help="valkey SIGKILLs" + kills % 2)
    parser.add_argument("--postgres-kills", type=int, default=None, help="Postgres SIGKILLs" + kills % 2)
    parser.add_argument(
        "--stall",
        action="store_true",
        help="SIGSTOP Postgres, valkey and the fake model in turn (each for --stall-seconds, then SIGCONT)",
    )
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument(
        "--stall-only",
        type=lambda text: text.split(","),
        default=["postgres", "model", "redis"],
        help="with --stall: which dependencies, comma-separated (postgres,model,redis)",
    )
    parser.add_argument(
        "--request-limit",
        type=float,
        default=Settings.model_fields["request_time_limit_seconds"].default,
        help="ENGRAM_REQUEST_TIME_LIMIT_SECONDS of the stack: each request's latency is checked against it",
    )
    parser.add_argument(
        "--external", action="store_true", help="Postgres and valkey run by the benchmark (restarted by it)"
    )
    parser.add_argument("--outage-s", type=float, default=2.0, help="--external: how long a killed server stays down")
    parser.add_argument("--llm-latency", type=parse_range, default=(2.0, 4.0), help="LOW,HIGH seconds per chat call")
    parser.add_argument(
        "--background-latency", type=parse_range, default=(0.3, 1.0), help="LOW,HIGH seconds per extraction call"
    )
    parser.add_argument("--embeddings", choices=("fake", "local"), default="fake")
    parser.add_argument("--turn-concurrency", type=int, default=8, help="ENGRAM_TURN_WORKER_CONCURRENCY")
    parser.add_argument("--background-concurrency", type=int, default=2, help="ENGRAM_BACKGROUND_WORKER_CONCURRENCY")
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="an extra ENGRAM_ setting for the stack"
    )
    parser.add_argument("--turn-timeout", type=float, default=600.0, help="a turn not done after this is lost")
    parser.add_argument("--settle-timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1")
    for name, default in (("worker_kills", 5), ("redis_kills", 2), ("postgres_kills", 2)):
        if getattr(args, name) is None:
            setattr(args, name, 0 if args.stall else default)
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative")
    if set(args.stall_only) - {"postgres", "model", "redis"}:
        parser.error(f"--stall-only takes postgres, model and redis, not {args.stall_only}")
    if args.stall_seconds <= 0 or args.request_limit < 0:
        parser.error("--stall-seconds must be positive and --request-limit not negative")
    for item in args.env:
        if "=" not in item or not item.startswith("ENGRAM_"):
            parser.error(f"--env takes ENGRAM_KEY=VALUE, not {item!r}")
    return args


def stack_env(args: argparse.Namespace, fake: FakeLLM) -> dict[str, str]:
    env = bench_env(fake.anthropic_base_url)  # with no rate limit: the benchmark measures recovery
    env.update(
        {
            "ENGRAM_AUTO_MEMORY": "true",
            "ENGRAM_TURN_WORKER_CONCURRENCY": str(args.turn_concurrency),
            "ENGRAM_BACKGROUND_WORKER_CONCURRENCY": str(args.background_concurrency),
            "ENGRAM_REQUEST_TIME_LIMIT_SECONDS": str(args.request_limit),
        }
    )
    if args.embeddings == "fake":
        env.update(
            {
                "ENGRAM_EMBEDDING_PROVIDER": "openai",
                "ENGRAM_EMBEDDING_BASE_URL": fake.openai_base_url,
                "ENGRAM_EMBEDDING_API_KEY": "bench-key",
            }
        )
    env.update(item.split("=", 1) for item in args.env)
    return env


def warm_up(stack: EngramUp, timeout: float = 180) -> None:
    """Two turns through every layer before the clock starts (workers up, pools open)."""
    plans = make_plans(2, 1, "warmup", 0)
    for plan in plans:
        plan.user_id = "warmup-" + plan.user_id
    driver = Driver(stack.url, stack.api_key, plans, timeout)
    driver.start()
    driver.done.wait(timeout)
    bad = [r for r in driver.records if r.status != "done"]
    if bad or not driver.records:
        raise BenchError(f"warm-up turns did not finish: {bad}")


def restarts_logged(log: str, service: str) -> int:
    return len(re.findall(rf"embedded server restarted.*service={service}\b", log))


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    model = LatencyModel(args.llm_latency, args.background_latency, args.seed)
    fake = FakeLLM()
    fake.default = model
    fake.start()
    stack = EngramUp(workdir, stack_env(args, fake), external=args.external)
    try:
        print(
            f"starting engram up in {workdir} ({'external' if args.external else 'embedded'} servers)", file=sys.stderr
        )
        stack.start()
        wait_until(stack.ready, 120, "the gateway's /readyz answering 200")
        warm_up(stack)
        plans = make_plans(args.sessions, args.turns, uuid.uuid4().hex[:6], args.seed)
        driver = Driver(stack.url, stack.api_key, plans, args.turn_timeout, args.request_limit)
        chaos = Chaos(stack, driver, args, fake)
        print(f"load: {args.sessions} sessions x {args.turns} turns; faults: {', '.join(chaos.plan)}", file=sys.stderr)
        started = time.monotonic()
        driver.start()
        chaos.start()
        try:
            while not (driver.done.is_set() and chaos.finished.is_set()):
                stack.check_alive()
                if chaos.error is not None:
                    raise chaos.error
                time.sleep(0.5)
            if chaos.error is not None:
                raise chaos.error
        except BaseException:
            driver.abort.set()
            raise
        load_s = time.monotonic() - started
        print(f"load done in {load_s:.0f} s; settling", file=sys.stderr)
        settle_s, state, settled = settle(stack.database_url, args.settle_timeout)
        stack.check_alive()
        checks = audit(stack.database_url, plans, {r.token for r in driver.records if r.turn_id is not None})
        samples = recovery(stack.database_url, chaos.faults)
        log = stack.log_text()
        kinds = Counter(f.kind for f in chaos.faults)
        if args.external:
            redis_restarts = sum(1 for f in chaos.faults if f.kind == "redis" and f.back_s is not None)
            postgres_restarts = sum(1 for f in chaos.faults if f.kind == "postgres" and f.back_s is not None)
        else:
            redis_restarts, postgres_restarts = restarts_logged(log, "valkey"), restarts_logged(log, "postgres")
        records = driver.records
        p95 = percentile(samples, 95)
        return {
            "turns_sent": sum(1 for r in records if r.turn_id is not None),
            "turns_done": checks["turns_done"],
            "lost_turns": checks["lost_turns"],
            "duplicate_replies": checks["duplicate_replies"],
            "duplicate_memories": checks["duplicate_memories"],
            "unmined_messages": state["unmined_messages"],
            "kills": kinds["worker"],
            "redis_restarts": redis_restarts,
            "postgres_restarts": postgres_restarts,
            "settle_s": round(settle_s, 1),
            "recovery_p95_s": round(p95, 1) if p95 is not None else None,
            "stalls": sum(1 for f in chaos.faults if f.kind in STALL_KINDS),
            "stall_s": args.stall_seconds if args.stall else None,
            "request_limit_s": args.request_limit,
            **driver.request_log.summary(),
            # Details
            "mode": "external" if args.external else "embedded",
            "sessions": args.sessions,
            "turns_per_session": args.turns,
            "settled": settled,
            "open_turns": state["open_turns"],
            "unembedded_memories": state["unembedded_memories"],
            "failed_turns": checks["failed_turns"],
            "missing_replies": checks["missing_replies"],
            "duplicate_user_messages": checks["duplicate_user_messages"],
            "memories": checks["memories"],
            "missing_memories": checks["missing_memories"],
            "redis_kills": kinds["redis"],
            "postgres_kills": kinds["postgres"],
            "recovery_samples": len(samples),
            "recovery_p50_s": rounded(percentile(samples, 50)),
            "recovery_max_s": rounded(max(samples) if samples else None),
            "load_s": round(load_s, 1),
            "client_503_retries": sum(r.retried_503 for r in records),
            "client_error_retries": sum(r.retried_errors for r in records),
            "llm_calls": dict(model.calls),
            "faults": [
                {k: v for k, v in asdict(f).items() if k != "affected"} | {"affected": len(f.affected)}
                for f in chaos.faults
            ],
            "turn_problems": [asdict(r) for r in records if r.status != "done"][:20],
        }
    finally:
        stack.stop()
        fake.stop()


def render(result: dict[str, Any]) -> str:
    lines = [
        f"chaos: {result['sessions']} sessions x {result['turns_per_session']} turns, {result['mode']} servers",
        f"  turns: sent {result['turns_sent']}, done {result['turns_done']}, lost {result['lost_turns']}, "
        f"failed {result['failed_turns']}",
        f"  exactly once: duplicate replies {result['duplicate_replies']}, duplicate user messages "
        f"{result['duplicate_user_messages']}, missing replies {result['missing_replies']}",
        f"  memory: {result['memories']} active, duplicates {result['duplicate_memories']}, missing "
        f"{result['missing_memories']}, unmined messages {result['unmined_messages']}, unembedded "
        f"{result['unembedded_memories']}",
        f"  faults: {result['kills']} worker kills, {result['redis_kills']} valkey kills "
        f"({result['redis_restarts']} restarts), {result['postgres_kills']} Postgres kills "
        f"({result['postgres_restarts']} restarts)",
        f"  recovery (fault -> affected turn done, {result['recovery_samples']} turns): p50 "
        f"{result['recovery_p50_s']} s, p95 {result['recovery_p95_s']} s, max {result['recovery_max_s']} s",
        f"  load {result['load_s']} s, settled in {result['settle_s']} s ({'yes' if result['settled'] else 'NO'}); "
        f"client retries: {result['client_503_retries']} x 503, {result['client_error_retries']} x connection",
        f"  requests: {result['requests']}, over their limit (ENGRAM_REQUEST_TIME_LIMIT_SECONDS "
        f"{result['request_limit_s']:g} s, + the long poll's wait) {result['requests_over_limit']}, worst "
        f"latency - limit {result['worst_request_excess_s']} s; outcomes {result['request_outcomes']}",
    ]
    if result["stalls"]:
        lines.insert(5, f"  stalls: {result['stalls']} of {result['stall_s']:g} s (SIGSTOP, then SIGCONT)")
    for fault in result["faults"]:
        extra = ""
        if fault["back_s"] is not None:
            extra = f", back after {fault['back_s']} s, gateway ready {fault['gateway_ready_s']} s later"
        elif fault["stalled_s"] is not None:
            extra = f", stopped {fault['stalled_s']} s, gateway ready {fault['gateway_ready_s']} s after SIGCONT"
        lines.append(
            f"    {fault['kind']:8} {fault['target']}: {fault['running']} running, {fault['affected']} hit"
            f"{'' if fault['during_load'] else ' (after the load)'}{extra}; recovery {fault['recovery_s']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with BenchRun(keep=args.keep) as cleanup:
        result = run(args, cleanup.workdir("engram-chaos-"))
        emit(render(result), result, args.json)
        return 0


if __name__ == "__main__":
    sys.exit(main())
