"""Queue `embeddings`: embed what is pending in batches: memories at the default priority, transcript units at
the bulk one."""

from __future__ import annotations

import contextlib
from typing import Any

from redis.exceptions import RedisError

from shared.embeddings import EmbeddingError, SpaceChanged
from shared.embeddings.drain import DrainKind, drain_started
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import DatabaseUnavailable
from shared.infra.redis_client import get_redis
from shared.memory.indexing import index_pending_memories, unindexed_memory_ids
from shared.memory.service import process_embedder
from shared.transcript.units import embed_pending_units, live_backlog, pending_units, transcript_batch_size
from workers.base import engram_task
from workers.dispatch import request_embedding_drain

# SpaceChanged: a reindex elsewhere switched the space under a batch; the retry checks it afresh.
_TRANSIENT = (DatabaseUnavailable, EmbeddingError, SpaceChanged)
_RETRIES: dict[str, Any] = {
    "autoretry_for": _TRANSIENT,
    "retry_backoff": 2,
    "retry_backoff_max": 120,
    "max_retries": 8,
}


def _started(kind: DrainKind) -> None:
    with contextlib.suppress(RedisError):  # without Redis the token simply expires
        drain_started(get_redis(), kind)


def _drain_memories() -> int:
    _started("memories")
    batch = index_pending_memories(process_embedder(), get_settings().embedding_batch_size)
    if batch.more:
        request_embedding_drain("memories")
    return batch.memories


@engram_task("embeddings", **_RETRIES)
def embed_pending() -> int:
    """One batch of pending memories (up to ENGRAM_EMBEDDING_BATCH_SIZE, one model call); queues the next drain
    if more are pending. Returns how many it embedded."""
    return _drain_memories()


@engram_task("embeddings", **_RETRIES)
def embed_transcript() -> int:
    """One batch of transcript units without a vector (a quarter of ENGRAM_EMBEDDING_BATCH_SIZE: see
    transcript_batch_size); queues the next if more are pending, at the bulk priority when they are a backlog
    (see request_embedding_drain). Returns how many it embedded."""
    _started("transcript")
    batch = embed_pending_units(process_embedder(), transcript_batch_size(get_settings().embedding_batch_size))
    if batch.more:
        request_embedding_drain("transcript", backlog=batch.backlog)
    return batch.units


@engram_task("embeddings", **_RETRIES)
def embed_memory(memory_id: int) -> int:
    """Messages sent before embeddings were batched: the memory is pending in Postgres like any other."""
    return _drain_memories()


@engram_task("embeddings")
def index_missing_memories() -> int:
    """Beat: a drain when memories or transcript units are pending but none is queued (its message lost: a Redis
    restart, retries exhausted, a broker down when the memory was written). Returns how many are pending (up to
    1000 of each)."""
    with db.connection() as conn:
        memories, units = len(unindexed_memory_ids(conn)), pending_units(conn)
    if memories:
        request_embedding_drain("memories")
    if units:
        batch_size = transcript_batch_size(get_settings().embedding_batch_size)
        request_embedding_drain("transcript", backlog=units > live_backlog(batch_size))
    return memories + units
