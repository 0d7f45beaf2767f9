"""Queue `flush`: mine the conversation before it is compacted, once per compaction cycle."""

from __future__ import annotations

from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.llm.types import LLMError
from shared.locks import HeartbeatLock
from shared.pipeline.jobs import flush_session, session_owner
from shared.redis_client import get_redis
from workers.base import engram_task
from workers.dispatch import enqueue_follow_up


@engram_task("flush", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def flush(session_id: int) -> str:
    settings = get_settings()
    # Several turns crossing the line at once enqueue several flushes: one runs, the others see the
    # lock (or, after it, the cycle guard in Postgres) and stop without calling the model.
    lock = HeartbeatLock(get_redis(), f"engram:lock:flush:{session_id}", settings.session_lock_ttl_seconds)
    if not lock.acquire():
        return "another flush of this session is running"
    try:
        outcome = flush_session(session_id, settings)
    finally:
        lock.release()
    enqueue_follow_up(outcome, *session_owner(session_id))
    return outcome.skipped or f"{len(outcome.changed_memory_ids)} memories"
