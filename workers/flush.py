"""Queue `flush`: mine the conversation before it is compacted, once per compaction cycle."""

from __future__ import annotations

from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.redis_client import get_redis
from shared.llm.types import LLMError
from shared.pipeline import debounce
from shared.pipeline.jobs import JobOutcome, flush_session, session_owner
from workers.base import alone_on_session, engram_task
from workers.dispatch import enqueue_follow_up


@engram_task("flush", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def flush(session_id: int) -> str:
    settings = get_settings()
    client = get_redis()

    def work() -> JobOutcome:
        # Under the extraction lock, a pending extraction has not started reading yet: it will mine every
        # message the flush would, within the max wait. A flush call of its own would only split that
        # extraction's batch into two model calls.
        pending = debounce.has_pending(client, "extract", session_id)
        return flush_session(session_id, settings, mine=not pending)

    def under_extraction_lock() -> JobOutcome:
        # The flush mines what extraction has not, so it also holds extraction's lock: the two never mine the
        # same messages at once. While an extraction runs, it mines what is unmined: the flush closes its cycle.
        outcome = alone_on_session("extract", session_id, work)
        return outcome if outcome is not None else flush_session(session_id, settings, mine=False)

    # Several turns crossing the line at once enqueue several flushes: one runs, the others see the lock (or,
    # after it, the cycle guard in Postgres) and stop without calling the model.
    outcome = alone_on_session("flush", session_id, under_extraction_lock)
    if outcome is None:
        return "another flush of this session is running"
    enqueue_follow_up(outcome, *session_owner(session_id))
    return outcome.skipped or f"{len(outcome.changed_memory_ids)} memories"
