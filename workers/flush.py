"""Queue `flush`: mine the conversation before it is compacted, once per compaction cycle."""

from __future__ import annotations

from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.llm.types import LLMError
from shared.pipeline.jobs import flush_session, session_owner
from workers.base import alone_on_session, engram_task
from workers.dispatch import enqueue_follow_up


@engram_task("flush", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def flush(session_id: int) -> str:
    settings = get_settings()
    # Several turns crossing the line at once enqueue several flushes: one runs, the others see the
    # lock (or, after it, the cycle guard in Postgres) and stop without calling the model.
    outcome = alone_on_session("flush", session_id, lambda: flush_session(session_id, settings))
    if outcome is None:
        return "another flush of this session is running"
    enqueue_follow_up(outcome, *session_owner(session_id))
    return outcome.skipped or f"{len(outcome.changed_memory_ids)} memories"
