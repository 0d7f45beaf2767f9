"""The supervisor keeps embedded servers running: a dead one is restarted, a failed restart is tried
again with backoff, and one that keeps dying or cannot come back stops the stack."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ops import supervisor as supervisor_module
from ops.supervisor import ChildKeptDying, ChildSpec, Supervisor


class FakeServer:
    def __init__(self, failing_restarts: int = 0) -> None:
        self.running = True
        self.failing_restarts = failing_restarts
        self.restarts = 0
        self.attempts = 0

    def alive(self) -> bool:
        return self.running

    def restart(self) -> None:
        self.attempts += 1
        if self.failing_restarts:
            self.failing_restarts -= 1
            raise RuntimeError("port taken")
        self.restarts += 1
        self.running = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The supervisor's clock only. Patching `time.monotonic` itself moves every thread's clock: an event loop of
    this process (a session fixture's fake server) then computes its next wake-up from the fake time, hours behind
    the real one, sleeps in select() for those hours, and never sees that it was told to stop (10 s per server)."""
    fake = Clock()
    monkeypatch.setattr(supervisor_module, "time", SimpleNamespace(**{**vars(time), "monotonic": fake}))
    return fake


def test_a_dead_server_is_restarted_once(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    server = FakeServer()
    sup.watch("valkey", server)
    sup.check_services()
    assert server.attempts == 0  # alive: left alone
    server.running = False
    sup.check_services()
    assert server.restarts == 1
    sup.check_services()
    assert server.restarts == 1


def test_a_failed_restart_is_retried_with_backoff(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    server = FakeServer(failing_restarts=2)
    sup.watch("postgres", server)
    server.running = False
    sup.check_services()
    assert server.attempts == 1
    sup.check_services()
    assert server.attempts == 1  # backing off: not tried again at once
    clock.now += 1.0
    sup.check_services()
    assert server.attempts == 2
    clock.now += 1.0
    sup.check_services()
    assert server.attempts == 2  # the second failure doubled the wait
    clock.now += 1.0
    sup.check_services()
    assert (server.attempts, server.restarts, server.running) == (3, 1, True)


def test_a_server_that_cannot_come_back_stops_the_stack(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    server = FakeServer(failing_restarts=1000)
    sup.watch("postgres", server)
    server.running = False
    with pytest.raises(ChildKeptDying, match="postgres could not be restarted"):
        for _ in range(1000):
            sup.check_services()
            clock.now += 5.0


def test_a_server_that_keeps_dying_stops_the_stack(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    server = FakeServer()
    sup.watch("valkey", server)
    with pytest.raises(ChildKeptDying, match="valkey died 6 times within a minute"):
        for _ in range(10):
            server.running = False
            sup.check_services()
            clock.now += 1.0
    assert server.restarts == 5


def _exits_at_once(tmp_path: Path) -> ChildSpec:
    return ChildSpec("worker-x", [sys.executable, "-c", "raise SystemExit(3)"], log_file=tmp_path / "x.log")


def _wait_exit(sup: Supervisor) -> None:
    sup.children["worker-x"].proc.wait(30)


def test_a_child_that_keeps_crashing_is_restarted_with_growing_delays(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    sup.clean_stale()  # as `engram up` does first: it creates the PID directory
    sup.spawn(_exits_at_once(tmp_path))
    spawned_at = []
    for _ in range(5):
        first = sup.children["worker-x"].proc
        _wait_exit(sup)
        while sup.children["worker-x"].proc is first:  # due time not reached: the clock moves on
            sup.check_children()
            if sup.children["worker-x"].proc is first:
                clock.now += 0.5
        spawned_at.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(spawned_at)]
    assert gaps == [1.0, 2.0, 4.0, 8.0]  # immediate first restart, then doubling
    _wait_exit(sup)
    with pytest.raises(ChildKeptDying, match=r"worker-x exited with code 3 6 times within a minute; see .*x\.log"):
        sup.check_children()


def test_a_child_that_ran_for_a_while_is_restarted_at_once(tmp_path: Path, clock: Clock) -> None:
    sup = Supervisor(tmp_path, {})
    sup.clean_stale()  # as `engram up` does first: it creates the PID directory
    sup.spawn(_exits_at_once(tmp_path))
    sup.children["worker-x"].restarts = [clock.now - 120.0] * 4  # old deaths do not count
    first = sup.children["worker-x"].proc
    _wait_exit(sup)
    sup.check_children()
    assert sup.children["worker-x"].proc is not first
