"""A Redis lock that stays held while its owner is alive.

The lock has a token (only the owner can release or extend it) and a TTL, so a crashed owner
releases it by expiry; a heartbeat thread extends the TTL every third of it while work runs.
`lost` turns true if the lock expired under us (e.g. the process was frozen past the TTL) — the
owner must then stop writing, because another worker may already hold it. A lease that ran out while
Redis itself was stopped (every lease in it lapses together) usually has no new holder: `retake` takes the
lock again if it is free, and the owner goes on only if what it guards shows nobody else worked meanwhile
(a turn's attempt number, shared/agent/turn_runner.py).

The token names its owner: the machine's boot id, the PID namespace, the PID and the process's
start time. A waiter on the same machine and in the same PID namespace can therefore tell for
certain that the holder is gone (no such process, or another process with a reused PID) and take
the lock over at once instead of waiting out the TTL; for a holder anywhere else it cannot tell,
and waits (`holder`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from types import TracebackType

import psutil
import redis
from redis.exceptions import LockError, LockNotOwnedError, RedisError

from shared.infra.logging import get_logger

log = get_logger(__name__)

_TOKEN_VERSION = "o1"

# Deletes the key only if it still holds the token we judged (the dead holder's), never a new owner's.
_DELETE_IF_TOKEN = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


@lru_cache(maxsize=1)
def _machine() -> tuple[str, str]:
    """(boot id, PID namespace) of this process; empty strings where the platform cannot say."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pid_namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return "", ""
    return boot_id, pid_namespace


def _start_time(pid: int) -> str:
    return f"{psutil.Process(pid).create_time():.2f}"


def owner_token() -> str:
    """A fresh lock token that names this process (computed per call: pool children fork)."""
    boot_id, pid_namespace = _machine()
    pid = os.getpid()
    try:
        started = _start_time(pid)
    except psutil.Error:
        started = ""
    return "|".join((_TOKEN_VERSION, boot_id, pid_namespace, str(pid), started, uuid.uuid4().hex))


class Holder(Enum):
    ALIVE = "alive"  # the holding process is running on this machine
    DEAD = "dead"  # it was on this machine and is gone
    UNKNOWN = "unknown"  # another machine or namespace, or a token without an owner


def holder_state(token: str | bytes) -> Holder:
    text = token.decode(errors="replace") if isinstance(token, bytes) else token
    parts = text.split("|")
    if len(parts) != 6 or parts[0] != _TOKEN_VERSION:
        return Holder.UNKNOWN
    _, boot_id, pid_namespace, pid_text, started, _ = parts
    if not boot_id or (boot_id, pid_namespace) != _machine() or not pid_text.isdigit() or not started:
        return Holder.UNKNOWN
    try:
        proc = psutil.Process(int(pid_text))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return Holder.DEAD  # killed, not yet reaped by its parent
        return Holder.ALIVE if _start_time(proc.pid) == started else Holder.DEAD  # PID reused
    except psutil.NoSuchProcess:
        return Holder.DEAD
    except psutil.Error:
        return Holder.UNKNOWN


@dataclass(frozen=True)
class LockHolder:
    state: Holder
    ttl_seconds: float  # until the lock expires by itself


def holder(client: redis.Redis, name: str) -> LockHolder | None:
    """Who holds `name` and for how long yet; None when nobody does."""
    pipe = client.pipeline(transaction=True)
    pipe.get(name)
    pipe.pttl(name)
    token, pttl = pipe.execute()
    if token is None:
        return None
    # pttl is -1 for a key without expiry (not one of ours); treat it as about to be looked at again.
    return LockHolder(holder_state(token), max(int(pttl), 0) / 1000)


def take_over_if_holder_dead(client: redis.Redis, name: str) -> bool:
    """Delete the lock if its holder is provably dead. True when the lock is free afterwards."""
    token = client.get(name)
    if token is None:
        return True
    if holder_state(token) is not Holder.DEAD:
        return False
    return bool(client.eval(_DELETE_IF_TOKEN, 1, name, token))


class HeartbeatLock:
    def __init__(self, client: redis.Redis, name: str, ttl_seconds: float) -> None:
        self.name = name
        self.ttl = ttl_seconds
        self._lock = client.lock(name, timeout=ttl_seconds, blocking=False, thread_local=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False, token=owner_token()):
            return False
        self._stop.clear()
        self.lost = False
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat:{self.name}", daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self._lock.reacquire()
            except LockNotOwnedError:
                self.lost = True
                log.warning("lock lease lost: it expired before it could be renewed", lock=self.name)
                return
            except RedisError:
                # Redis briefly unreachable: keep trying; if it stays away past the TTL the
                # next reacquire reports the loss.
                continue

    def retake(self) -> bool:
        """After `lost`: take the lock again if nobody holds it now (a fresh token, a new heartbeat). False when
        another owner has it, or Redis does not answer. The caller must still check that nobody worked under the
        lock while it was lost."""
        self.release()  # ends the heartbeat; the old token matches nothing any more, so nothing is deleted
        try:
            return self.acquire()
        except RedisError:
            return False

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        # Expired or Redis gone: nothing is left to release.
        with contextlib.suppress(LockError, RedisError):
            self._lock.release()

    def __enter__(self) -> HeartbeatLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def is_locked(client: redis.Redis, name: str) -> bool:
    return bool(client.exists(name))


def session_lock_name(session_id: int) -> str:
    return f"engram:lock:session:{session_id}"
