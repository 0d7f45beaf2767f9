"""Sending tasks by name, so the gateway never imports task modules (or their dependencies)."""

from __future__ import annotations

from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import RedisError

from shared.channels.inbound import Accepted
from shared.logging import get_logger
from shared.memory.userdata import Erasure, drop_live_state
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


def enqueue_delivery(delivery_id: int) -> None:
    app.send_task("engram.channels.deliver", kwargs={"delivery_id": delivery_id}, queue="channels")


def dispatch_accepted(accepted: Accepted) -> None:
    """After a channel event is committed: drain its turn's session, or deliver its answer, and drop the
    live streams of a user it erased. Best effort: with the broker away, the stalled-turn and
    stalled-delivery sweeps pick the work up from Postgres."""
    try:
        if accepted.session_id is not None:
            enqueue_drain(accepted.session_id)
        if accepted.delivery_id is not None:
            enqueue_delivery(accepted.delivery_id)
    except (BrokerUnavailable, RedisError, OSError) as exc:
        log.warning(
            "broker unavailable; the sweep will pick up the channel event",
            session_id=accepted.session_id,
            delivery_id=accepted.delivery_id,
            error=str(exc),
        )
    if accepted.erased_turn_ids:
        drop_live_state(get_redis(), Erasure(turn_ids=list(accepted.erased_turn_ids)))
