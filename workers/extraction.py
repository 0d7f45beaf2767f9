"""Queue `extraction`: debounced fact extraction after turns, and personality synthesis."""

from __future__ import annotations

from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.llm.types import LLMError
from shared.logging import get_logger
from shared.pipeline import debounce
from shared.pipeline.jobs import JobOutcome, extract_session, session_owner, synthesize_personality
from shared.redis_client import get_redis
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

    def work() -> JobOutcome:
        debounce.started(client, "extract", session_id)
        return extract_session(session_id, settings)

    outcome = alone_on_session("extract", session_id, work)
    if outcome is None:
        raise SessionBusy(f"session {session_id} is being extracted")
    session = session_owner(session_id)
    enqueue_follow_up(outcome, *session)
    log.info(
        "extraction done", session_id=session_id, memories=len(outcome.changed_memory_ids), skipped=outcome.skipped
    )
    return outcome.skipped or f"{len(outcome.changed_memory_ids)} memories"


@engram_task("extraction", autoretry_for=(DatabaseUnavailable, LLMError), retry_backoff=2, max_retries=5)
def synthesize(tenant_id: int, user_id: int) -> str:
    outcome = synthesize_personality(tenant_id, user_id, get_settings())
    enqueue_follow_up(outcome)
    return outcome.skipped or "directive updated"
