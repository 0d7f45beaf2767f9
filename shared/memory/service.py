"""Search as the API and the agent tools use it: the query embedded when it can be, settings applied."""

from __future__ import annotations

from functools import lru_cache

from shared.config import Settings, get_settings
from shared.db import Conn
from shared.embeddings import (
    Embedder,
    EmbeddingError,
    LocalEmbedder,
    embed_texts,
    embedder_from_settings,
    ensure_embedding_space,
    vector_search_available,
)
from shared.embeddings.providers import local_model
from shared.logging import get_logger
from shared.memory.search import SearchFilters, SearchOptions, SearchResult, search
from shared.memory.store import Scope

log = get_logger(__name__)


@lru_cache(maxsize=1)
def process_embedder() -> Embedder:
    return embedder_from_settings(get_settings())


def warm_query_embedder() -> None:
    """Load the local embedding model now rather than inside the first search request.

    Loading it (torch + MiniLM) takes seconds: a gateway's first `/memories/search` took 10.7 s
    while the SQL of the same search runs in milliseconds. The gateway calls this at startup, off
    its event loop but before it serves (api/app.py says why). Remote (OpenAI-compatible) embedders
    have nothing to load."""
    try:
        if isinstance(process_embedder(), LocalEmbedder):
            local_model()
    except Exception as exc:  # search falls back to its lexical legs; the first query retries the load
        log.warning("could not preload the embedding model", error=str(exc))


def options_from_settings(settings: Settings, limit: int) -> SearchOptions:
    return SearchOptions(
        limit=limit,
        mode=settings.search_fusion,
        rrf_k=settings.search_rrf_k,
        vector_weight=settings.search_vector_weight,
        min_score=settings.search_min_score,
        overfetch=settings.search_overfetch,
    )


def query_vector(conn: Conn, text: str) -> list[float] | None:
    """The query's embedding, or None when vector search cannot run (no space yet, re-indexing,
    or the embedding provider failed) — search then runs on its lexical legs alone."""
    try:
        embedder = process_embedder()
        if not vector_search_available(conn):
            return None
        ensure_embedding_space(conn, embedder)
        with conn.transaction():  # a failure here must not abort the caller's transaction
            return embed_texts(conn, embedder, [text], get_settings().embedding_batch_size)[0]
    except EmbeddingError as exc:
        log.warning("query embedding failed; searching without vectors", error=str(exc))
        return None


def search_memories(
    conn: Conn,
    scope: Scope,
    query: str,
    *,
    limit: int = 10,
    filters: SearchFilters | None = None,
    touch: bool = False,
    mode: str | None = None,
) -> list[SearchResult]:
    settings = get_settings()
    options = options_from_settings(settings, limit)
    if mode in ("weighted", "rrf"):
        options.mode = mode  # type: ignore[assignment]
    return search(
        conn, scope, query, query_vector=query_vector(conn, query), filters=filters, options=options, touch=touch
    )
