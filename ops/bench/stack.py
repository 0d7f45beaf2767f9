"""A private engram stack for benchmarks in a temporary directory: embedded Postgres and valkey, the gateway, the
workers, beat if asked, and the fake LLM unless `llm_url` is given."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from ops.embedded import EmbeddedPostgres, EmbeddedRedis, free_port, wait_for_port
from ops.process_commands import beat_argv, gateway_argv, worker_argv
from shared.infra.config import Settings
from shared.infra.secretbox import generate_key
from shared.queueing.queues import BACKGROUND_QUEUES, INTERACTIVE_QUEUES, QUEUES

STOP_GRACE_S = 15.0


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    queues: tuple[str, ...]
    concurrency: int


def up_workers(
    turn_concurrency: int | None = None, background_concurrency: int | None = None
) -> tuple[WorkerSpec, ...]:
    """The workers `engram up` runs (ops/stack.py), by default with its pool sizes (the settings' defaults)."""
    fields = Settings.model_fields
    turn_concurrency = turn_concurrency or fields["turn_worker_concurrency"].default
    background_concurrency = background_concurrency or fields["background_worker_concurrency"].default
    return (
        WorkerSpec("worker-turns", INTERACTIVE_QUEUES, turn_concurrency),
        WorkerSpec("worker-background", BACKGROUND_QUEUES, background_concurrency),
    )


class Child:
    """A subprocess in its own process group (stopping it stops its children too), output in a log file."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, grace: float = STOP_GRACE_S
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.grace = grace  # seconds between SIGTERM and SIGKILL
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tail(self, chars: int | None = 3000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text if chars is None else text[-chars:]

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def check_alive(self) -> None:
        if (code := self.exit_code()) is not None:
            raise BenchError(f"{self.name} exited with code {code}; log tail:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(self.grace)
        # Whatever is left in the group (an orphaned pool child, a parent that ignored SIGTERM) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self.proc = None


class LocalStack:
    """Everything the benchmark runs against, in `workdir`; `stop` undoes whatever `start` got to."""

    def __init__(
        self,
        workdir: Path,
        workers: int | Sequence[WorkerSpec],
        llm_latency_ms: float = 0.0,
        llm_url: str | None = None,
        *,
        beat: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.llm_latency_ms = llm_latency_ms  # only for the fake this stack starts itself
        self.llm_url = llm_url
        self.worker_specs = (WorkerSpec("worker", QUEUES, workers),) if isinstance(workers, int) else tuple(workers)
        self.beat = beat
        self.extra_env = dict(env or {})
        self.log_dir = workdir / "logs"
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None
        self.children: list[Child] = []
        self.gateway: Child | None = None
        self.workers: list[Child] = []
        self.url = ""
        self.database_url = ""
        self.redis_url = ""

    def start(self) -> str:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.postgres = EmbeddedPostgres(self.workdir / "postgres")
        database_url = self.database_url = self.postgres.start()
        self.redis = EmbeddedRedis(self.workdir / "valkey")
        redis_url = self.redis_url = self.redis.start()
        api_key = prepare_database(database_url)

        env = bench_env(self.llm_url or self._start_fake_llm()) | {
            "ENGRAM_DATABASE_URL": database_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_DATA_DIR": str(self.workdir / "data"),
            # As `engram up` writes it on first start: channel secrets are sealed with it.
            "ENGRAM_SECRET_KEY": generate_key(),
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.gateway = self._spawn("gateway", gateway_argv("127.0.0.1", port, log_level="warning"), env)
        for spec in self.worker_specs:
            argv = worker_argv(spec.queues, spec.name, concurrency=spec.concurrency, log_level="WARNING")
            self.workers.append(self._spawn(spec.name, argv, env))
        if self.beat:
            self._spawn("beat", beat_argv("WARNING"), env)

        def up() -> bool:
            self.check_alive()
            return ready(self.url)

        wait_until(up, 300, "the gateway answering /readyz")
        return api_key

    def _start_fake_llm(self) -> str:
        llm_port = free_port()
        # A process of its own: in the benchmark's it would compete with the client threads for the GIL.
        fake = self._spawn(
            "fake-llm",
            [sys.executable, "-m", "ops.fake_llm", "--port", str(llm_port), "--latency-ms", str(self.llm_latency_ms)],
            dict(os.environ),
        )
        if not wait_for_port("127.0.0.1", llm_port, 30):
            fake.check_alive()
            raise BenchError("the fake LLM did not start listening")
        return f"http://127.0.0.1:{llm_port}"

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        child = Child(name, argv, env, self.log_dir).start()
        self.children.append(child)
        return child

    def check_alive(self) -> None:
        for child in self.children:
            child.check_alive()

    def stop(self) -> None:
        # Clients of Postgres and Redis first, so none logs a storm of connection errors.
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        for service in (self.redis, self.postgres):
            if service is not None:
                stop_quietly(service)
        self.redis = self.postgres = None


def ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    return False


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise BenchError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.2)


def stop_quietly(server: EmbeddedPostgres | EmbeddedRedis) -> None:
    try:
        server.stop()
    except Exception as exc:  # the rest of the cleanup still runs
        print(f"warning: could not stop {type(server).__name__}: {exc}", file=sys.stderr)


def prepare_database(database_url: str) -> str:
    from shared.access.auth import create_key
    from shared.infra.db import connect
    from shared.infra.migrate import apply_migrations

    with connect(database_url) as conn:
        apply_migrations(conn)  # leaves the connection in autocommit mode
        conn.autocommit = False
        key = create_key(conn, "bench", "bench")
        conn.commit()
    return key


def bench_env(llm_url: str) -> dict[str, str]:
    """An engram process's environment: the caller's without its ENGRAM_* settings, the model at `llm_url`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_")}
    return env | {
        "ENGRAM_LLM_PROVIDER": "anthropic",
        "ENGRAM_ANTHROPIC_API_KEY": "bench-key",
        "ENGRAM_ANTHROPIC_BASE_URL": llm_url,
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_RATE_LIMIT_KEY_PER_SECOND": "0",
        "ENGRAM_RATE_LIMIT_TENANT_PER_SECOND": "0",
    }


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop what was started."""


def raise_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signal.Signals(signum).name)
