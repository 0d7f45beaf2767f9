"""Queue `compaction`: summarise and retire old messages when a session outgrows its threshold."""

from __future__ import annotations

from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.llm.types import LLMError
from shared.locks import HeartbeatLock
from shared.pipeline.jobs import compact_session, extract_session, session_owner
from shared.redis_client import get_redis
from workers.base import engram_task
from workers.dispatch import enqueue_follow_up


@engram_task("compaction", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def compact(session_id: int) -> str:
    settings = get_settings()
    lock = HeartbeatLock(get_redis(), f"engram:lock:compact:{session_id}", settings.session_lock_ttl_seconds)
    if not lock.acquire():
        return "another compaction of this session is running"
    try:
        # Every message is mined before it leaves the context.
        enqueue_follow_up(extract_session(session_id, settings), *session_owner(session_id))
        outcome = compact_session(session_id, settings)
    finally:
        lock.release()
    return outcome.skipped or f"compacted {outcome.compacted}, kept {outcome.kept}, documents {outcome.documents}"
