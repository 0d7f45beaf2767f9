"""Running a statement that must wait on another transaction's lock, and letting it go at the right moment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from shared.infra import db
from shared.infra.db import Conn

T = TypeVar("T")


def waiting_on_a_lock(watcher: Conn, pid: int) -> bool:
    row = watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row["wait_event_type"] == "Lock"


def once_blocked(call: Callable[[], T], blocked_pid: int, release: Callable[[], None], timeout: float = 30) -> T:
    """Run `call` in a thread; once backend `blocked_pid` (the connection `call` uses) waits on a lock, run
    `release` (the holder commits); return what `call` returned, or raise what it raised."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as exc:  # raised again in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    with db.connect(autocommit=True) as watcher:  # its own connection: a pooled one would be in the way
        thread.start()
        pause = threading.Event()
        while not waiting_on_a_lock(watcher, blocked_pid):
            if not thread.is_alive():
                raise AssertionError(f"the call ended without waiting on a lock: {errors or results}")
            pause.wait(0.01)
        release()
        thread.join(timeout=timeout)
    assert not thread.is_alive(), "the call did not finish after the lock was released"
    if errors:
        raise errors[0]
    return results[0]
