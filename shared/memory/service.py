"""Search as the API and the agent tools use it: the query embedded when it can be, settings applied, and a
time the query names ("last May") read as a window whose results come first."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from datetime import datetime
from functools import lru_cache
from typing import Any

from shared.embeddings import (
    Embedder,
    EmbeddingError,
    EmbeddingSpaceMismatch,
    current_space,
    ensure_embedding_space,
    vector_search_available,
)
from shared.embeddings.cache import cache_model, check_vectors, register_vector_types
from shared.embeddings.providers import LocalEmbedder, OnnxLocalEmbedder, embedder_from_settings
from shared.embeddings.space import follow_recorded_space
from shared.infra import db
from shared.infra.config import Settings, get_settings
from shared.infra.db import Conn
from shared.infra.logging import get_logger
from shared.infra.metrics import observe_embedding_call
from shared.memory import follow_up, query_parts, speaker_lines
from shared.memory.reads import touch_accessed
from shared.memory.rows import Scope
from shared.memory.search import Ask, SearchFilters, SearchOptions, SearchResult, search_many
from shared.memory.search_reads import SearchReads, read_before_search
from shared.memory.time_window import TimeWindow, may_name_time, time_window

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
        if isinstance(embedder, OnnxLocalEmbedder) and embedder.follows_space:
            _follow_recorded_space(embedder)
        if isinstance(embedder, LocalEmbedder | OnnxLocalEmbedder):
            embedder.load()
    except Exception as exc:  # search falls back to its lexical legs; the first query retries the load
        log.warning("could not preload the embedding model", error=str(exc))


def _follow_recorded_space(embedder: Embedder) -> None:
    """Load the model the database's vectors were made with (auto backend), not the one a new database
    gets; without a database yet, the embedder keeps its default and follows on first use.

    On a connection of its own, not the pool's: the gateway warms its pool after this, and a checkout
    that waited for the pool's first connection made the pool grow, which the warm-up's resize then
    added to (11 connections for a pool of 10, seen in CI)."""
    try:
        with db.connect(autocommit=True) as conn:
            follow_recorded_space(embedder, current_space(conn))
    except Exception as exc:
        log.info("embedding space not read at start", error=f"{type(exc).__name__}: {exc}")


def options_from_settings(settings: Settings, limit: int) -> SearchOptions:
    return SearchOptions(
        limit=limit,
        mode=settings.search_fusion,
        rrf_k=settings.search_rrf_k,
        vector_weight=settings.search_vector_weight,
        relative_floor=settings.search_relative_floor,
        overfetch=settings.search_overfetch,
    )


QUERY_VECTOR_MEMO_SIZE = 1024  # ~1.6 MB of 384-dim vectors held as Python floats


@lru_cache(maxsize=QUERY_VECTOR_MEMO_SIZE)
def _embed_query(model: str, dimension: int, text: str) -> tuple[float, ...]:
    """The query's vector from the process's embedder, memoised for the last QUERY_VECTOR_MEMO_SIZE queries: a
    repeated query (an agent asking the same thing each turn, a retried request) is not embedded again.
    Keyed by the cache model (provider/model) and dimension as the embedding cache is, so a vector made by
    one model is never served to another; `query_vector` checks the space first, so a re-indexing or
    mismatched space never gets a vector from here either. Failures are not memoised."""
    embedder = process_embedder()
    vectors = embedder.embed([text])
    check_vectors(embedder, vectors, expected_count=1, dimension=dimension)
    observe_embedding_call(model, 1)
    return tuple(vectors[0])


def forget_recent_queries() -> None:
    """Drop the process's memo of query vectors (tests; after replacing a model under the same name)."""
    _embed_query.cache_clear()


def query_vector(conn: Conn, text: str, space_rows: Sequence[Mapping[str, Any]] | None = None) -> list[float] | None:
    """The query's embedding, or None when vector search cannot run (no space yet, re-indexing, or the embedding
    provider failed) — search then runs on its lexical legs alone. Memoised (see `_embed_query`). `space_rows`: the
    embedding space as the caller read it along with its other reads (SPACE_QUERY); None = read it here."""
    try:
        embedder = process_embedder()
        if not vector_search_available(conn, space_rows):
            return None
        ensure_embedding_space(conn, embedder, space_rows)
        # The search binds the vector as pgvector's type: this connection must know it (the embedding
        # cache used to register it on the way; a memo hit may come on a fresh pooled connection).
        register_vector_types(conn)
        # Straight to the model, not through the embedding cache: a query is rarely asked twice in
        # another process, its cache lookup and insert cost round trips on every search, and a cached
        # query vector would outlive the query (it is no chunk's text, so forget_unused never drops it).
        # A copy of the memo's tuple: callers may not alias each other's vectors.
        return list(_embed_query(cache_model(embedder), embedder.dimension, text))
    except EmbeddingError as exc:
        log.warning("query embedding failed; searching without vectors", error=str(exc))
        return None
    except EmbeddingSpaceMismatch as exc:
        # This process's model is not the one that made the stored vectors (a reindex elsewhere switched the
        # space, or a misconfiguration `engram doctor` reports): its query vector would rank them at random.
        log.warning("query model does not match the stored vectors; searching without vectors", error=str(exc))
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
    prior: SearchReads | None = None,
    as_of: datetime | None = None,
) -> list[SearchResult]:
    """The best `limit` results for `query`. When it names a time (resolved against `as_of`, default now) and
    the filters set none, what falls in that window is searched for on its own too and ranks first: "what
    did I say last May" puts May's excerpt above a closer match from June. When it names several people
    who speak in the user's conversations, it is also asked once per person, and the names stay out of its
    vector (query_parts). What its best hit leads to is searched for next (follow_up, speaker_lines).
    `prior`: what search reads first (search_reads.py), as the caller read it with its own reads; None = read
    it here, in one round trip."""
    settings = get_settings()
    options = options_from_settings(settings, limit)
    if mode in ("weighted", "rrf"):
        options.mode = mode  # type: ignore[assignment]
    filters = filters or SearchFilters()
    # Reading a time out of the query takes dateparser milliseconds of Python: it runs beside the query's
    # embedding (onnx lets go of the GIL) rather than before it.
    resolving: Future[TimeWindow | None] | None = None
    if filters.since is None and filters.until is None and may_name_time(query):
        resolving = _time_reader().submit(time_window, query, as_of)
    prior = prior or read_before_search(conn, scope)
    named = query_parts.named_speakers(query, prior.speakers)
    vector = query_vector(conn, query_parts.what_is_asked(query, named), prior.space)
    window = resolving.result() if resolving is not None else None
    within = dataclasses.replace(filters, since=window.start, until=window.end) if window else None
    # The question, each person's part and the time window: the question's own search first; the others on a
    # spare connection beside it when there is one (they only join the ranking at the end), else after it in
    # the same round trip. Every part has the question's vector (its names are what the vector leaves out).
    questions = [Ask(query, vector, filters)] + [Ask(part, vector, filters) for part in query_parts.parts(query, named)]
    asks = [ask for question in questions for ask in _asks_of(question, within)]
    with db.spare_connection() if len(asks) > 1 else nullcontext() as spare:
        large = prior.large_user
        beside = _searcher().submit(_search_on_spare, spare, scope, asks[1:], options, large) if spare else None
        try:
            searched = search_many(conn, scope, asks if beside is None else asks[:1], options, large_user=large)[0]
            whole = searched[0]
            # What the question's own best hits lead to: the next round trip, while the others run.
            following = follow_up.follow_up_query(query, whole)
            around = speaker_lines.around_query(scope, whole, filters, limit)
            more = [Ask(following, None, filters)] if following is not None else []  # no vector: full text's
            followed, rows = (
                search_many(conn, scope, more, options, {"around": around} if around else None, large_user=large)
                if more or around is not None
                else ([], {})
            )
        finally:
            if beside is not None:
                wait([beside])  # the spare goes back to the pool only when its reads are done
        if beside is not None:
            searched += beside.result()
    step = 2 if within else 1  # each question's search, then its search inside the window if any
    ranked = [
        _window_first(searched[at], searched[at + 1] if within else None, options)
        for at in range(0, len(searched), step)
    ]
    results = ranked[0] if len(ranked) == 1 else query_parts.take_turns(ranked, limit)
    if following is not None:
        results = follow_up.merge(results, followed[0], limit)
    if around is not None:
        results = speaker_lines.insert(results, speaker_lines.around_results(rows["around"]), limit)
    return _touched(conn, scope, results, touch)


def _search_on_spare(
    conn: Conn, scope: Scope, asks: Sequence[Ask], options: SearchOptions, large_user: bool
) -> list[list[SearchResult]]:
    register_vector_types(conn)
    return search_many(conn, scope, asks, options, large_user=large_user)[0]


@lru_cache(maxsize=1)
def _searcher() -> ThreadPoolExecutor:
    # Each job holds a spare pooled connection, so the pool's size bounds how many run at once.
    return ThreadPoolExecutor(max_workers=get_settings().db_pool_size, thread_name_prefix="search-beside")


def _touched(conn: Conn, scope: Scope, results: list[SearchResult], touch: bool) -> list[SearchResult]:
    if touch:
        touch_accessed(conn, scope, [r.id for r in results if r.id is not None])
    return results


def _asks_of(question: Ask, within: SearchFilters | None) -> list[Ask]:
    """A question's searches: as asked, then inside the query's time window when it names one."""
    return [question] if within is None else [question, dataclasses.replace(question, filters=within)]


def _window_first(
    found: list[SearchResult], inside: list[SearchResult] | None, options: SearchOptions
) -> list[SearchResult]:
    """`found` with what the query's time window holds (`inside`, searched for on its own) first."""
    return found if inside is None else rank_window_first(inside, found, options.limit)


@lru_cache(maxsize=1)
def _time_reader() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="time-window")


def rank_window_first(within: list[SearchResult], everything: list[SearchResult], limit: int) -> list[SearchResult]:
    """The results inside the query's time window, best first, then the rest of `everything`: each window
    result's score is raised above the best outside it, so scores stay in rank order."""
    key = query_parts.result_key
    inside = {key(r) for r in within}
    outside = [r for r in everything if key(r) not in inside]
    top = max((r.score for r in outside), default=0.0)
    lifted = [dataclasses.replace(r, score=r.score + top) for r in within]
    return (lifted + outside)[:limit]
