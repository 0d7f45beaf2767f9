"""Embeddings: providers (local MiniLM, OpenAI-compatible), the per-model cache, the database's space."""

from shared.embeddings.cache import content_hash, embed_texts, evict_stale, forget_unused
from shared.embeddings.providers import (
    Embedder,
    EmbeddingError,
    LocalEmbedder,
    OpenAIEmbedder,
    embedder_from_settings,
)
from shared.embeddings.space import (
    SPACE_QUERY,
    EmbeddingSpaceMismatch,
    SpaceChanged,
    current_space,
    ensure_embedding_space,
    hold_space_for_write,
    reindex,
    vector_search_available,
)

__all__ = [
    "SPACE_QUERY",
    "Embedder",
    "EmbeddingError",
    "EmbeddingSpaceMismatch",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "SpaceChanged",
    "content_hash",
    "current_space",
    "embed_texts",
    "embedder_from_settings",
    "ensure_embedding_space",
    "evict_stale",
    "forget_unused",
    "hold_space_for_write",
    "reindex",
    "vector_search_available",
]
