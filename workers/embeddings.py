"""Queue `embeddings`: embed what is pending (memories, then transcript units), in batches."""

from __future__ import annotations

import contextlib
from typing import Any

from redis.exceptions import RedisError

from shared import db
from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.embeddings import EmbeddingError, SpaceChanged
from shared.embeddings.drain import drain_started
from shared.memory.indexing import index_pending_memories, unindexed_memory_ids
from shared.memory.service import process_embedder
from shared.redis_client import get_redis
from shared.transcript.units import embed_pending_units, pending_units
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


def _drain() -> int:
    """One model call for pending memories and one for pending transcript units, at most."""
    with contextlib.suppress(RedisError):  # without Redis the token simply expires
        drain_started(get_redis())
    embedder, batch_size = process_embedder(), get_settings().embedding_batch_size
    memories = index_pending_memories(embedder, batch_size)
    units = embed_pending_units(embedder, batch_size)
    if memories.more or units.more:
        request_embedding_drain()
    return memories.memories + units.units


@engram_task("embeddings", **_RETRIES)
def embed_pending() -> int:
    """One batch of pending memories and one of pending transcript units (up to ENGRAM_EMBEDDING_BATCH_SIZE
    texts each); queues the next drain if more are pending. Returns how many memories and units it embedded."""
    return _drain()


@engram_task("embeddings", **_RETRIES)
def embed_memory(memory_id: int) -> int:
    """Messages sent before embeddings were batched: the memory is pending in Postgres like any other."""
    return _drain()


@engram_task("embeddings")
def index_missing_memories() -> int:
    """Beat: a drain when memories or transcript units are pending but none is queued (its message lost: a Redis
    restart, retries exhausted, a broker down when the memory was written). Returns how many are pending (up to
    1000 of each)."""
    with db.connection() as conn:
        pending = len(unindexed_memory_ids(conn)) + pending_units(conn)
    if pending:
        request_embedding_drain()
    return pending
