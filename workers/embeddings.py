"""Queue `embeddings`: embed memories (and, later, transcript blocks) after their write commits."""

from __future__ import annotations

from shared import db
from shared.config import get_settings
from shared.db import DatabaseUnavailable
from shared.embeddings import EmbeddingError
from shared.memory.indexing import index_memory_committed, unindexed_memory_ids
from shared.memory.service import process_embedder
from shared.pipeline.jobs import index_transcript as index_transcript_blocks
from workers.base import engram_task
from workers.dispatch import enqueue_embed_memory


@engram_task(
    "embeddings",
    autoretry_for=(DatabaseUnavailable, EmbeddingError),
    retry_backoff=2,
    retry_backoff_max=120,
    max_retries=8,
)
def embed_memory(memory_id: int) -> int:
    return index_memory_committed(memory_id, process_embedder(), get_settings().embedding_batch_size)


@engram_task("embeddings", autoretry_for=(DatabaseUnavailable, EmbeddingError), retry_backoff=2, max_retries=8)
def index_transcript(session_id: int) -> int:
    return index_transcript_blocks(session_id, process_embedder(), get_settings().embedding_batch_size)


@engram_task("embeddings")
def index_missing_memories() -> int:
    """Beat: re-enqueue memories whose embedding task was lost (Redis restart, retries exhausted)."""
    with db.connection() as conn:
        ids = unindexed_memory_ids(conn)
    for memory_id in ids:
        enqueue_embed_memory(memory_id)
    return len(ids)
