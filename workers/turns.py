"""Queue `turns`: run a session's queued turns."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.agent import LockLost, drain_session
from shared.db import DatabaseUnavailable
from shared.runtime import turn_deps
from workers.base import engram_task
from workers.dispatch import enqueue_embed_memory


@engram_task(
    "turns",
    # Postgres or Redis briefly away: try again with backoff; the turn row keeps its place.
    autoretry_for=(DatabaseUnavailable, RedisConnectionError, RedisTimeoutError, LockLost),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=30,
)
def drain(session_id: int) -> int:
    return drain_session(session_id, turn_deps(enqueue_embed_memory))
