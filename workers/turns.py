"""Queue `turns`: run a session's queued turns, then schedule the memory work they call for."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared import db
from shared.agent import LockLost, drain_session
from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.logging import get_logger
from shared.pipeline import debounce
from shared.pipeline.jobs import plan_after_turn
from shared.redis_client import get_redis
from shared.runtime import turn_deps
from workers.base import engram_task
from workers.dispatch import enqueue_compaction, enqueue_embed_memory, enqueue_extraction, enqueue_flush

log = get_logger(__name__)


def after_turn(session_id: int, turn_id: int) -> None:
    """Debounced extraction always; a flush or a compaction when the session has grown enough.

    Best effort: the turn is already saved, and the pending-work sweeps catch anything lost here."""
    settings = get_settings()
    if not settings.auto_memory:
        return
    try:
        plan = debounce.schedule(
            get_redis(),
            "extract",
            session_id,
            debounce=settings.extraction_debounce_seconds,
            max_wait=settings.extraction_max_wait_seconds,
        )
        enqueue_extraction(session_id, plan.token, plan.countdown)
        with db.connection() as conn:
            session = conn.execute("SELECT * FROM sessions WHERE id = %s", (session_id,)).fetchone()
        if session is None:
            return
        follow = plan_after_turn(session, settings)
        if follow.flush:
            enqueue_flush(session_id)
        if follow.compact:
            enqueue_compaction(session_id)
    except (RedisError, DatabaseUnavailable, OSError) as exc:
        log.warning(
            "could not schedule memory work after the turn", session_id=session_id, turn_id=turn_id, error=str(exc)
        )


@engram_task(
    "turns",
    # Postgres or Redis briefly away: try again with backoff; the turn row keeps its place.
    autoretry_for=(DatabaseUnavailable, RedisConnectionError, RedisTimeoutError, LockLost),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=30,
)
def drain(session_id: int) -> int:
    return drain_session(session_id, turn_deps(enqueue_embed_memory, after_turn))
