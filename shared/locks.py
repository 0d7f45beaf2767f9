"""A Redis lock that stays held while its owner is alive.

The lock has a token (only the owner can release or extend it) and a TTL, so a crashed owner
releases it by expiry; a heartbeat thread extends the TTL every third of it while work runs.
`lost` turns true if the lock expired under us (e.g. the process was frozen past the TTL) — the
owner must then stop writing, because another worker may already hold it.
"""

from __future__ import annotations

import contextlib
import threading
from types import TracebackType

import redis
from redis.exceptions import LockError, LockNotOwnedError, RedisError


class HeartbeatLock:
    def __init__(self, client: redis.Redis, name: str, ttl_seconds: float) -> None:
        self.name = name
        self.ttl = ttl_seconds
        self._lock = client.lock(name, timeout=ttl_seconds, blocking=False, thread_local=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False):
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
                return
            except RedisError:
                # Redis briefly unreachable: keep trying; if it stays away past the TTL the
                # next reacquire reports the loss.
                continue

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
