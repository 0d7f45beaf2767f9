"""Embeddings: the protocol every model implements, the per-model cache, the database's space.

The models themselves are adapters (shared/adapters/embeddings/), picked by `shared.embeddings.providers`,
which is not re-exported here: the adapters import the protocol (base.py), and importing that runs this file,
which therefore must not import them.
"""

from shared.embeddings.base import Embedder, EmbeddingError
from shared.embeddings.cache import content_hash, embed_texts, evict_stale, forget_unused
from shared.embeddings.space import (
    SPACE_QUERY,
    EmbeddingSpaceMismatch,
    SpaceChanged,
    current_space,
    ensure_embedding_space,
    ensure_space_for_pending,
    hold_space_for_write,
    reindex,
    vector_search_available,
)

__all__ = [
    "SPACE_QUERY",
    "Embedder",
    "EmbeddingError",
    "EmbeddingSpaceMismatch",
    "SpaceChanged",
    "content_hash",
    "current_space",
    "embed_texts",
    "ensure_embedding_space",
    "ensure_space_for_pending",
    "evict_stale",
    "forget_unused",
    "hold_space_for_write",
    "reindex",
    "vector_search_available",
]
