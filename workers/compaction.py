"""Queue `compaction`: summarise and retire old messages when a session outgrows its threshold.

After a turn the session's extraction compacts it, in its own model call (shared.pipeline.jobs.
extract_and_compact), so nothing sends this task after a turn; it still runs a compaction sent to the queue
(one queued before an upgrade, or by an operator)."""

from __future__ import annotations

from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.redis_client import get_redis
from shared.llm.types import LLMError
from shared.pipeline import debounce
from shared.pipeline.jobs import CompactionOutcome, compact_session, extract_session, session_owner
from workers.base import alone_on_session, engram_task
from workers.dispatch import enqueue_follow_up


@engram_task("compaction", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def compact(session_id: int) -> str:
    settings = get_settings()
    client = get_redis()

    def work() -> CompactionOutcome:
        # Every message is mined before it leaves the context, by this pass or by the session's pending
        # extraction: one is due within the max wait and reads compacted messages too (compaction marks
        # messages, it never deletes them), and the summary carries them meanwhile. Mining here as well would
        # split that extraction's batch: two model calls where one does.
        if not debounce.has_pending(client, "extract", session_id):
            enqueue_follow_up(extract_session(session_id, settings), *session_owner(session_id))
        return compact_session(session_id, settings)

    outcome = alone_on_session("compact", session_id, work)
    if outcome is None:
        return "another compaction of this session is running"
    return outcome.skipped or f"compacted {outcome.compacted}, kept {outcome.kept}, documents {outcome.documents}"
