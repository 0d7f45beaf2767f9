"""Queue `extraction`: debounced fact extraction after turns, and personality synthesis."""

from __future__ import annotations

from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.llm.types import LLMError
from shared.pipeline import debounce
from shared.pipeline.jobs import (
    CompactionOutcome,
    JobOutcome,
    extract_and_compact,
    extract_session,
    session_owner,
)
from shared.pipeline.personality_job import synthesize_personality
from workers.base import alone_on_session, engram_task
from workers.dispatch import enqueue_extraction, enqueue_follow_up

log = get_logger(__name__)


class SessionBusy(RuntimeError):
    """Another worker is extracting this session; try again shortly (new messages need a pass)."""


@engram_task(
    "extraction",
    # debounce.schedule's longest delay: the debounce, or a chatty session's stretched quiet period (≤ max wait)
    max_countdown=lambda settings: max(settings.extraction_debounce_seconds, settings.extraction_max_wait_seconds),
    autoretry_for=(SessionBusy, DatabaseUnavailable, LLMError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def extract(session_id: int, token: str) -> str:
    settings = get_settings()
    client = get_redis()
    decision = debounce.decide(
        client,
        "extract",
        session_id,
        token,
        debounce=settings.extraction_debounce_seconds,
        max_wait=settings.extraction_max_wait_seconds,
    )
    if decision.rearm is not None:  # later turns arrived: wait for the session to go quiet (or the cap)
        enqueue_extraction(session_id, decision.rearm.token, decision.rearm.countdown)
        return "re-armed for a later turn"
    if not decision.run:
        return "superseded by a later turn"

    def work() -> tuple[JobOutcome, CompactionOutcome | None]:
        debounce.started(client, "extract", session_id)
        # A session over the compaction threshold is compacted by this run, in the same model call as its
        # extraction: the turn that crossed the threshold sent no compaction task of its own.
        both = alone_on_session("compact", session_id, lambda: extract_and_compact(session_id, settings))
        if both is None:  # a compaction task holds the session and summarises it: this run only mines
            return extract_session(session_id, settings), None
        return both

    ran = alone_on_session("extract", session_id, work)
    if ran is None:
        raise SessionBusy(f"session {session_id} is being extracted")
    outcome, compaction = ran
    session = session_owner(session_id)
    enqueue_follow_up(outcome, *session)
    log.info(
        "extraction done", session_id=session_id, memories=len(outcome.changed_memory_ids), skipped=outcome.skipped
    )
    done = outcome.skipped or f"{len(outcome.changed_memory_ids)} memories"
    if compaction is not None and compaction.compacted:
        return f"{done}; compacted {compaction.compacted}, kept {compaction.kept}, documents {compaction.documents}"
    return done


@engram_task("extraction", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def synthesize(tenant_id: int, user_id: int) -> str:
    outcome = synthesize_personality(tenant_id, user_id, get_settings())
    enqueue_follow_up(outcome)
    return outcome.skipped or "directive updated"
