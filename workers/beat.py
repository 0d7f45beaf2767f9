"""RedBeat, made to ride out a Redis that goes away or fails over instead of exiting.

RedBeat extends its leader lock at every tick; when Redis cannot be reached (a restart, a Sentinel
failover while the sentinels elect the replica) or the lock is gone (written to a primary that died
before its replica had it), the extension raises and beat exits: a supervisor had to start it again.
Here a tick that cannot reach Redis sends nothing and tries again shortly; a beat whose lock is gone
takes it again if it is free, and otherwise waits as a standby (another beat is the leader). Nothing
is sent without the lock, so two beats never both send; and every job run is keyed in Postgres, so a
duplicate fire would be a no-op anyway (workers/app.py).
"""

from __future__ import annotations

from typing import Any

from redbeat import RedBeatScheduler
from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT, get_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.lock import Lock

from shared.infra.logging import get_logger

log = get_logger(__name__)

# Between tries while Redis is unreachable (a Sentinel failover takes a few seconds).
RETRY_SECONDS = 1.0
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError)  # MasterNotFoundError is a ConnectionError


class Scheduler(RedBeatScheduler):
    lock: Lock | None = None  # RedBeat's leader lock (its start hook sets it)
    _standby = False

    def _hold_lock(self) -> bool:
        """Extend the leader lock, or take it again if it was lost and is free. False: another beat leads."""
        if self.lock is None:
            # Redis was unreachable when beat started (RedBeat's start hook then leaves no lock): make it now.
            client = get_redis(self.app)
            lock = client.lock(self.lock_key, timeout=self.lock_timeout, sleep=self.max_interval)
            lock.lua_extend = client.register_script(LUA_EXTEND_TO_SCRIPT)  # RedBeat's: extend *to* the timeout
            self.lock = lock
            self._standby = True
        if not self._standby:
            try:
                self.lock.extend(int(self.lock_timeout))
                return True
            except LockError:  # not ours any more (expired while Redis was away, or lost in a failover)
                pass
        if self.lock.acquire(blocking=False):
            log.warning("beat: leader lock taken again after it was lost")
            self._standby = False
            return True
        if not self._standby:
            log.warning("beat: leader lock held by another beat; standing by")
            self._standby = True
        return False

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        try:
            if self.lock_key and not self._hold_lock():
                return float(self.max_interval)
            remaining_times = []
            for entry in self.schedule.values():
                next_time_to_run = self.maybe_due(entry, **self._maybe_due_kwargs)
                if next_time_to_run:
                    remaining_times.append(next_time_to_run)
            return float(min([*remaining_times, self.max_interval]))
        except _UNREACHABLE as exc:
            log.warning("beat: Redis unreachable; sending nothing until it answers", error=str(exc))
            return RETRY_SECONDS
        except RuntimeError:  # as RedBeat's own tick: the schedule changed while it was iterated
            log.debug("beat: RuntimeError", exc_info=True)
            return float(self.max_interval)

    def close(self) -> None:
        try:
            super().close()
        except _UNREACHABLE as exc:  # the lock expires by itself
            log.warning("beat: could not release the leader lock", error=str(exc))
