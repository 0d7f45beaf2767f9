"""Runs the stack's processes for `engram up` and stops every one of them on exit.

Each child runs in its own process group and is recorded in `<run_dir>/procs/<name>.pid`, so a
later start can find and stop the leftovers of a run that was killed (SIGKILL, power loss)
before it could clean up. A child that dies while the stack runs is restarted with backoff; one
that keeps dying stops the whole stack with its name and exit code.

The embedded servers (Postgres, valkey) are watched the same way (`watch`): each check polls them,
a dead one is logged and restarted on the same address, a failed restart is tried again with
backoff, and one that keeps dying (or cannot be brought back) stops the stack with the reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from shared.infra.logging import get_logger

log = get_logger(__name__)

STOP_GRACE_SECONDS = 20
MAX_RESTARTS_PER_MINUTE = 5
# A child's first restart within a minute is immediate, then 1, 2, 4 … s: a child that crashes on start
# (a port taken, a bad setting) does not spin the CPU, and the stack still gives up within the minute.
CHILD_RESTART_MAX_DELAY_SECONDS = 8.0
# Marks processes started by a supervisor of this data dir, so stale-PID cleanup never kills a
# process that merely reused a recorded PID.
OWNER_ENV = "ENGRAM_SUPERVISOR_RUN_DIR"


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Output appended to this file (the cluster has too many processes for one terminal); None = inherited.
    log_file: Path | None = None


@dataclass
class Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes]
    restarts: list[float] = field(default_factory=list)
    restart_at: float | None = None  # monotonic time its pending restart is due; None while it runs


class ChildKeptDying(RuntimeError):
    pass


class Service(Protocol):
    """An embedded server the supervisor keeps running (ops/embedded.py)."""

    def alive(self) -> bool: ...

    def restart(self) -> None: ...


# A server that cannot be brought back for this long stops the stack.
SERVICE_RESTART_GIVE_UP_SECONDS = 120.0
SERVICE_RETRY_MAX_DELAY_SECONDS = 15.0


@dataclass
class WatchedService:
    name: str
    service: Service
    deaths: list[float] = field(default_factory=list)
    down_since: float | None = None  # monotonic time its death was noticed; None while it runs
    failed_restarts: int = 0
    next_attempt: float = 0.0


def _owned_by(pid: int, run_dir: Path) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        return proc if proc.environ().get(OWNER_ENV) == str(run_dir) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop_groups(procs: Sequence[subprocess.Popen[bytes] | psutil.Process]) -> list[int]:
    """SIGTERM every process's group at once and give them one shared grace period (their shutdowns overlap
    instead of adding up), then SIGKILL each group: whatever is left in it, such as a pool child that outlived
    its parent or a parent that ignored SIGTERM. Returns the pids that had not exited within the grace."""
    for proc in procs:
        _kill_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    late = []
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
            late.append(proc.pid)
    for proc in procs:
        _kill_group(proc.pid, signal.SIGKILL)
    return late


class Supervisor:
    def __init__(self, run_dir: Path, base_env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.proc_dir = run_dir / "procs"
        self.base_env = {**base_env, OWNER_ENV: str(run_dir)}
        self.children: dict[str, Child] = {}
        self.services: list[WatchedService] = []

    def clean_stale(self) -> list[str]:
        """Stop processes left by an earlier run of this data dir; remove their PID files."""
        self.proc_dir.mkdir(parents=True, exist_ok=True)
        pid_files = list(self.proc_dir.glob("*.pid"))
        stale: list[tuple[str, psutil.Process]] = []
        for pid_file in pid_files:
            try:
                pid = int(pid_file.read_text().strip())
            except ValueError:
                pid = -1
            proc = _owned_by(pid, self.run_dir) if pid > 0 else None
            if proc is not None:
                stale.append((pid_file.stem, proc))
        _stop_groups([proc for _, proc in stale])
        for pid_file in pid_files:
            pid_file.unlink(missing_ok=True)
        return [f"{name} (pid {proc.pid})" for name, proc in stale]

    def spawn(self, spec: ChildSpec) -> None:
        output = None
        if spec.log_file is not None:
            spec.log_file.parent.mkdir(parents=True, exist_ok=True)
            output = spec.log_file.open("ab")
        try:
            proc = subprocess.Popen(
                spec.argv,
                env={**self.base_env, **spec.env},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT if output is not None else None,
                start_new_session=True,
            )
        finally:
            if output is not None:
                output.close()  # the child has its own copy
        # Written aside and renamed into place: a reader (a restart in progress, `engram down`, a test) sees the
        # old pid or the new one, never an empty file.
        pid_file = self.proc_dir / f"{spec.name}.pid"
        staged = pid_file.with_suffix(".pid.tmp")
        staged.write_text(str(proc.pid))
        staged.replace(pid_file)
        previous = self.children.get(spec.name)
        self.children[spec.name] = Child(spec, proc, previous.restarts if previous else [])

    def watch(self, name: str, service: Service) -> None:
        """Keep an embedded server running from now on (checked with the children)."""
        self.services.append(WatchedService(name, service))

    def check_services(self) -> None:
        """Restart embedded servers that died; raise when one keeps dying or cannot be restarted."""
        for watched in self.services:
            now = time.monotonic()
            if watched.down_since is None:
                if watched.service.alive():
                    continue
                watched.deaths = [t for t in watched.deaths if now - t < 60]
                if len(watched.deaths) >= MAX_RESTARTS_PER_MINUTE:
                    raise ChildKeptDying(
                        f"embedded {watched.name} died {len(watched.deaths) + 1} times within a minute"
                    )
                watched.deaths.append(now)
                watched.down_since, watched.failed_restarts, watched.next_attempt = now, 0, now
                log.warning("embedded server died; restarting", service=watched.name)
            if now < watched.next_attempt:
                continue
            try:
                watched.service.restart()
            except Exception as exc:  # the server's own start errors (port taken, shared memory in use, …)
                watched.failed_restarts += 1
                if now - watched.down_since > SERVICE_RESTART_GIVE_UP_SECONDS:
                    raise ChildKeptDying(
                        f"embedded {watched.name} could not be restarted for "
                        f"{SERVICE_RESTART_GIVE_UP_SECONDS:.0f}s: {exc}"
                    ) from exc
                delay = min(2.0 ** (watched.failed_restarts - 1), SERVICE_RETRY_MAX_DELAY_SECONDS)
                watched.next_attempt = now + delay
                log.warning(
                    "embedded server did not restart; trying again",
                    service=watched.name,
                    retry_in_s=delay,
                    error=str(exc)[-500:],
                )
                continue
            log.warning(
                "embedded server restarted",
                service=watched.name,
                down_s=round(time.monotonic() - watched.down_since, 2),
                attempts=watched.failed_restarts + 1,
            )
            watched.down_since = None

    def check_children(self) -> None:
        """Restart embedded servers and children that exited; raise when one keeps dying."""
        self.check_services()  # first: the children need them
        now = time.monotonic()
        for name, child in list(self.children.items()):
            code = child.proc.poll()
            if code is None:
                continue
            if child.restart_at is None:
                child.restarts = [t for t in child.restarts if now - t < 60]
                where = {"log": str(child.spec.log_file)} if child.spec.log_file is not None else {}
                if len(child.restarts) >= MAX_RESTARTS_PER_MINUTE:
                    see = f"; see {child.spec.log_file}" if child.spec.log_file is not None else ""
                    raise ChildKeptDying(
                        f"{name} exited with code {code} {len(child.restarts) + 1} times within a minute{see}"
                    )
                recent = len(child.restarts)
                delay = min(2.0 ** (recent - 1), CHILD_RESTART_MAX_DELAY_SECONDS) if recent else 0.0
                child.restart_at = now + delay
                log.warning("process exited; restarting", process=name, exit_code=code, delay_s=delay, **where)
                _kill_group(child.proc.pid, signal.SIGKILL)  # its own children must not outlive it
            if now < child.restart_at:
                continue
            child.restarts.append(now)
            self.spawn(child.spec)

    def stop_all(self) -> None:
        """SIGTERM every process group, wait, SIGKILL what is left; remove PID files."""
        late = _stop_groups([child.proc for child in self.children.values()])
        for child in self.children.values():
            if child.proc.pid in late:
                log.warning("process did not stop in time; killed", process=child.spec.name)
            child.proc.poll()
            (self.proc_dir / f"{child.spec.name}.pid").unlink(missing_ok=True)
        self.children.clear()
