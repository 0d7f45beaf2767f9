"""Real Celery worker and beat processes for integration tests (never eager mode)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from ops.process_commands import beat_argv, gateway_argv, worker_argv
from shared.queueing.queues import QUEUES


class CeleryProcess:
    """A celery worker or beat in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd  # `python -m` puts it first on sys.path: the source tree the process runs
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> CeleryProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cwd,
            start_new_session=True,
        )
        return self

    def wait_ready(self, marker: str = "ready.", timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log_path.read_text(errors="replace"):
                return
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    @property
    def pids(self) -> list[int]:
        """The main process and its pool children."""
        if self.proc is None:
            return []
        try:
            parent = psutil.Process(self.proc.pid)
            return [parent.pid, *(child.pid for child in parent.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def kill_hard(self) -> None:
        """SIGKILL the whole process group: no warm shutdown, no chance to ack or requeue."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        self.proc = None


def worker(
    name: str, env: dict[str, str], log_dir: Path, concurrency: int = 2, queues: tuple[str, ...] = QUEUES
) -> CeleryProcess:
    argv = worker_argv(queues, name, concurrency=concurrency, log_level="INFO")
    return CeleryProcess(name, argv, env, log_dir)


def beat(env: dict[str, str], log_dir: Path, name: str = "beat") -> CeleryProcess:
    return CeleryProcess(name, beat_argv("INFO"), env, log_dir)


def gateway(env: dict[str, str], log_dir: Path, port: int, name: str = "gateway") -> CeleryProcess:
    """The gateway as deployed: uvicorn with the app factory in its own process (wait with `wait_http`)."""
    return CeleryProcess(name, gateway_argv("127.0.0.1", port), env, log_dir)


def wait_http(process: CeleryProcess, url: str, timeout: float = 60) -> None:
    """Until `url` answers 200 (or the process exits, which fails with its log)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.proc is not None
        if process.proc.poll() is not None:
            raise RuntimeError(f"{process.name} exited early:\n{process.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{process.name} did not answer {url} in {timeout}s:\n{process.tail()}")
