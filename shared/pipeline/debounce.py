"""Debounced scheduling of per-session work with a cap on the total wait.

Each schedule writes a fresh token; a delayed task runs only if its token is still the latest
(later turns superseded it) — unless the session has waited `max_wait` since its first pending
schedule, so a session that never goes quiet is still processed. Redis holds only these
coordination keys; what was processed is decided by the watermark in Postgres.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis

KEY_TTL_SECONDS = 3600


@dataclass(frozen=True)
class Schedule:
    token: str
    countdown: float


def _keys(kind: str, session_id: int) -> tuple[str, str]:
    return f"engram:debounce:{kind}:{session_id}:token", f"engram:debounce:{kind}:{session_id}:first"


def schedule(
    client: redis.Redis, kind: str, session_id: int, *, debounce: float, max_wait: float, now: float | None = None
) -> Schedule:
    now = time.time() if now is None else now
    token = uuid.uuid4().hex
    token_key, first_key = _keys(kind, session_id)
    pipe = client.pipeline()
    pipe.set(first_key, repr(now), nx=True, ex=KEY_TTL_SECONDS)
    pipe.set(token_key, token, ex=KEY_TTL_SECONDS)
    pipe.get(first_key)
    _, _, first_raw = pipe.execute()
    first = float(first_raw) if first_raw else now
    # Never later than the cap: the last schedule before the cap fires at the cap.
    countdown = max(0.0, min(debounce, first + max_wait - now))
    return Schedule(token, countdown)


def should_run(
    client: redis.Redis, kind: str, session_id: int, token: str, *, max_wait: float, now: float | None = None
) -> bool:
    now = time.time() if now is None else now
    token_key, first_key = _keys(kind, session_id)
    latest, first_raw = client.mget(token_key, first_key)
    if latest is None or (latest.decode() if isinstance(latest, bytes) else latest) == token:
        return True  # the latest schedule (or the keys expired: run rather than lose work)
    return first_raw is not None and now - float(first_raw) >= max_wait


def started(client: redis.Redis, kind: str, session_id: int) -> None:
    """A run began: the cap counts from the next pending schedule, not this one's."""
    client.delete(_keys(kind, session_id)[1])
