"""Search as the API and the agent tools use it: the query embedded when it can be, settings applied."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache

from shared.config import Settings, get_settings
from shared.db import Conn
from shared.embeddings import (
    Embedder,
    EmbeddingError,
    LocalEmbedder,
    embedder_from_settings,
    ensure_embedding_space,
    vector_search_available,
)
from shared.embeddings.cache import cache_model, register_vector_types
from shared.embeddings.providers import OnnxLocalEmbedder, local_model
from shared.logging import get_logger
from shared.memory.search import SearchFilters, SearchOptions, SearchResult, search
from shared.memory.store import Scope
from shared.metrics import observe_embedding_call

log = get_logger(__name__)


@lru_cache(maxsize=1)
def process_embedder() -> Embedder:
    return embedder_from_settings(get_settings())


def warm_query_embedder() -> None:
    """Load the local embedding model now rather than inside the first search request.

    Loading it takes seconds with torch (a gateway's first `/memories/search` took 10.7 s while the SQL
    of the same search runs in milliseconds), well under one with onnxruntime once the model is exported,
    and the export itself (first start on a machine) takes seconds. The gateway calls this at startup,
    off its event loop but before it serves (api/app.py says why). Remote (OpenAI-compatible) embedders
    have nothing to load."""
    try:
        embedder = process_embedder()
        if isinstance(embedder, OnnxLocalEmbedder):
            embedder.load()
        elif isinstance(embedder, LocalEmbedder):
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


class _RecentQueries:
    """The last QUERY_VECTOR_MEMO_SIZE query vectors of this process: a repeated query (an agent asking
    the same thing each turn, a retried request) is not embedded again. Keyed by the cache model
    (provider/model) and dimension as the embedding cache is, so a vector made by one model
    is never served to another; the space check above still runs first, so a re-indexing or mismatched
    space never gets a vector from here either."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, int, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, str]) -> list[float] | None:
        with self._lock:
            vector = self._items.get(key)
            if vector is None:
                return None
            self._items.move_to_end(key)
        return list(vector)  # a copy: callers may not alias each other's vectors

    def put(self, key: tuple[str, int, str], vector: list[float]) -> None:
        with self._lock:
            self._items[key] = tuple(vector)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


QUERY_VECTOR_MEMO_SIZE = 1024  # ~1.6 MB of 384-dim vectors held as Python floats
_recent_queries = _RecentQueries(QUERY_VECTOR_MEMO_SIZE)


def forget_recent_queries() -> None:
    """Drop the process's memo of query vectors (tests; after replacing a model under the same name)."""
    _recent_queries.clear()


def query_vector(conn: Conn, text: str) -> list[float] | None:
    """The query's embedding, or None when vector search cannot run (no space yet, re-indexing,
    or the embedding provider failed) — search then runs on its lexical legs alone."""
    try:
        embedder = process_embedder()
        if not vector_search_available(conn):
            return None
        ensure_embedding_space(conn, embedder)
        # The search binds the vector as pgvector's type: this connection must know it (the embedding
        # cache used to register it on the way; a memo hit may come on a fresh pooled connection).
        register_vector_types(conn)
        key = (cache_model(embedder), embedder.dimension, text)
        cached = _recent_queries.get(key)
        if cached is not None:
            return cached
        # Straight to the model, not through the embedding cache: a query is rarely asked twice in
        # another process, its cache lookup and insert cost round trips on every search, and a cached
        # query vector would outlive the query (it is no chunk's text, so forget_unused never drops it).
        vectors = embedder.embed([text])
        if len(vectors) != 1 or len(vectors[0]) != embedder.dimension:
            raise EmbeddingError(f"{cache_model(embedder)} returned an unexpected query vector")
        observe_embedding_call(cache_model(embedder), 1)
        vector = list(vectors[0])
        _recent_queries.put(key, vector)
        return vector
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
