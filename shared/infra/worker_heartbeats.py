"""Worker liveness: each worker's main process writes a heartbeat to Redis every ENGRAM_WORKER_HEARTBEAT_SECONDS,
under a key that expires after three intervals; a worker whose key is there is live. The console reads them
with a SCAN, which answers at once, where Celery's inspect/ping waits out its whole timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import redis

KEY_PREFIX = "engram:worker:"
# Missing two beats in a row (a busy host, a Redis blip) does not yet make a worker look dead.
TTL_INTERVALS = 3


@dataclass(frozen=True)
class WorkerBeat:
    hostname: str
    pid: int
    queues: tuple[str, ...]
    started_at: float  # epoch seconds
    last_seen: float  # epoch seconds

    def seconds_ago(self, now: float | None = None) -> int:
        return max(0, round((time.time() if now is None else now) - self.last_seen))


def key(hostname: str) -> str:
    return f"{KEY_PREFIX}{hostname}"


def record(client: redis.Redis, beat: WorkerBeat, interval_seconds: float) -> None:
    """Write (or refresh) the worker's heartbeat; it expires unless written again within three intervals."""
    value = json.dumps({**asdict(beat), "queues": list(beat.queues)})
    client.set(key(beat.hostname), value, px=max(1, int(interval_seconds * TTL_INTERVALS * 1000)))


def forget(client: redis.Redis, hostname: str) -> None:
    """Remove the heartbeat of a worker that shuts down cleanly (it is gone now, not in three intervals)."""
    client.delete(key(hostname))


def _parse(raw: bytes | str | None) -> WorkerBeat | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return WorkerBeat(
            hostname=str(data["hostname"]),
            pid=int(data["pid"]),
            queues=tuple(str(q) for q in data["queues"]),
            started_at=float(data["started_at"]),
            last_seen=float(data["last_seen"]),
        )
    except (ValueError, KeyError, TypeError):  # a foreign or damaged value: not a worker we can show
        return None


def live_workers(client: redis.Redis) -> list[WorkerBeat]:
    """Every worker with an unexpired heartbeat, by hostname."""
    keys = list(client.scan_iter(f"{KEY_PREFIX}*", count=100))
    if not keys:
        return []
    beats = (_parse(raw) for raw in client.mget(keys))
    return sorted((b for b in beats if b is not None), key=lambda b: b.hostname)


def unserved_queues(beats: Iterable[WorkerBeat], queues: Iterable[str]) -> list[str]:
    """The queues no live worker consumes: their messages wait until one starts."""
    served = {q for beat in beats for q in beat.queues}
    return [q for q in queues if q not in served]
