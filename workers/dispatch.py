"""Sending tasks by name, so the gateway never imports task modules (or their dependencies)."""

from __future__ import annotations

from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import RedisError

from shared import db
from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.logging import get_logger
from shared.pipeline import debounce
from shared.pipeline.jobs import plan_after_turn
from shared.redis_client import get_redis
from workers.app import app

log = get_logger(__name__)


def enqueue_drain(session_id: int) -> None:
    app.send_task("engram.turns.drain", kwargs={"session_id": session_id}, queue="turns")


def enqueue_embed_memory(memory_id: int) -> None:
    app.send_task("engram.embeddings.embed_memory", kwargs={"memory_id": memory_id}, queue="embeddings")


def enqueue_extraction(session_id: int, token: str, countdown: float) -> None:
    app.send_task(
        "engram.extraction.extract",
        kwargs={"session_id": session_id, "token": token},
        queue="extraction",
        countdown=countdown,
    )


def enqueue_synthesis(tenant_id: int, user_id: int) -> None:
    app.send_task(
        "engram.extraction.synthesize", kwargs={"tenant_id": tenant_id, "user_id": user_id}, queue="extraction"
    )


def enqueue_flush(session_id: int) -> None:
    app.send_task("engram.flush.flush", kwargs={"session_id": session_id}, queue="flush")


def enqueue_compaction(session_id: int) -> None:
    app.send_task("engram.compaction.compact", kwargs={"session_id": session_id}, queue="compaction")


def enqueue_transcript_indexing(session_id: int) -> None:
    app.send_task("engram.embeddings.index_transcript", kwargs={"session_id": session_id}, queue="embeddings")


def schedule_memory_work(session_id: int) -> None:
    """After new messages in a session (a chat turn, an ingested batch): debounced extraction always;
    a flush or a compaction when the session has grown enough. Governed by ENGRAM_AUTO_MEMORY.

    Best effort: the messages are already saved, and the pending-work sweeps catch anything lost here."""
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
    except (RedisError, BrokerUnavailable, DatabaseUnavailable, OSError) as exc:
        log.warning("could not schedule memory work; the sweeps will", session_id=session_id, error=str(exc))
