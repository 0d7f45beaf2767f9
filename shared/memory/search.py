"""Hybrid search over a user's memories and transcript units, fused in one SQL statement.

A document is a memory or a transcript unit (one message with its neighbours, migration 0015); inside the
statement both are keyed by `doc`: a memory's id, or minus the unit's chunk id.

Legs (`SearchOptions.legs` picks which run):
- full text: an OR query over the question's lexemes. AND semantics (plainto_tsquery /
  websearch_to_tsquery) need every word of a natural-language question to match and so find
  almost nothing; OR keeps recall and lets the ranking do the work. A memory scores
  Σ idf(word) × ts_rank(memory, word) over the query words it contains: plain ts_rank of an OR
  query scores one matched word the same whether it is in one memory or in all of them, so a
  question naming the user ("What did Caroline…") ranked every memory mentioning her alike. idf is
  BM25's, over the user's memories and units that pass the filters; ts_rank supplies a saturating term
  frequency and the label weights (TERM_WEIGHTS: key > value or message > metadata.context or the
  message's neighbours).
- ILIKE: only when full text finds nothing (e.g. a query made of stop words or odd tokens).
- vector: cosine distance on memory chunks and transcript units, best chunk per memory. HNSW
  with pgvector 0.8 iterative scans, so filtering to one user (and the memory filters) still
  returns k rows even when the user owns a tiny share of the table.
- entity: memories linked to entities named in the query, each entity weighted by its specificity
  (its idf over the user's memories, scaled to 0..1): the user's own name or a partner linked to
  half the memories singles nothing out.

Fusion: `weighted` (vector similarity × w + max-normalised text score × (1 − w), plus small bonuses
for matched entities and for a message whose speaker the query names) or `rrf` (Σ 1/(k + rank) over
legs). Results scoring under `relative_floor` × the best result's score are dropped: a cut relative to
the query's own best hit, which needs no tuning per model or corpus the way an absolute floor did
(similarities of one model cluster higher than another's; a lexical-only search scores on another
scale altogether). In weighted mode every candidate gets its real vector similarity even if the vector
leg did not return it (see `vec_fill`). Every result carries each leg's rank and score so the ranking
can be explained. The statement scores the candidates too (`_score_sql`, the same formula as `_fuse`)
and returns only the best `limit` plus a margin, with their text: the few hundred candidates never leave
Postgres. The statement is built in search_sql.py, the records are in search_records.py; this module runs it
and re-exports both as the search's public API.

The benchmark page of the docs has the figures (ops/bench/locomo_retrieval.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.infra.db import Conn, DictRow, Query, fetch_together
from shared.memory.reads import touch_accessed
from shared.memory.rows import Scope
from shared.memory.search_records import (
    ALL_LEGS,
    Ask,
    FusionMode,
    Leg,
    SearchFilters,
    SearchOptions,
    SearchResult,
)
from shared.memory.search_sql import (
    ENTITY_BONUS,
    SPEAKER_BONUS,
    TERM_WEIGHTS,
    fetch_size,
    like_patterns,
    search_statement,
)

# A large user's HNSW search looks wider: with many near-alike memories the user's nearest vectors crowd together,
# and a narrow search returns near neighbours rather than the nearest (docs/benchmarks.md, "Search at scale").
LARGE_USER_EF_SEARCH = 400

__all__ = [
    "ALL_LEGS",
    "ENTITY_BONUS",
    "SPEAKER_BONUS",
    "TERM_WEIGHTS",
    "Ask",
    "FusionMode",
    "Leg",
    "SearchFilters",
    "SearchOptions",
    "SearchResult",
    "fetch_size",
    "like_patterns",
    "search",
    "search_many",
    "search_settings",
    "search_statement",
    "transcript_result",
]


def _fuse(row: dict[str, Any], options: SearchOptions, use_vector: bool) -> tuple[float, dict[str, dict[str, Any]]]:
    legs: dict[str, dict[str, Any]] = {}
    if row["text_rank"] is not None:
        legs["text"] = {
            "rank": row["text_rank"],
            "score": float(row["text_score"]),
            "normalized": float(row["text_normalized"] or 0),
        }
    if row["like_rank"] is not None:
        legs["like"] = {"rank": row["like_rank"], "score": float(row["like_score"])}
    if row["vector_rank"] is not None:
        legs["vector"] = {
            "rank": row["vector_rank"],
            "similarity": float(row["vector_similarity"]),
            "chunk_id": row["vector_chunk_id"],
        }
    elif row["fill_similarity"] is not None and options.mode == "weighted":
        # Not among the vector leg's results, but scored for fusion (see `vec_fill`): rank None.
        legs["vector"] = {
            "rank": None,
            "similarity": float(row["fill_similarity"]),
            "chunk_id": row["fill_chunk_id"],
        }
    if row["speaker_named"]:
        legs["speaker"] = {"rank": None, "named": True}
    if row["entity_rank"] is not None:
        legs["entity"] = {
            "rank": row["entity_rank"],
            "matches": row["entity_matches"],
            "specificity": round(float(row["entity_specificity"]), 4),
        }
    # The entity leg counts in proportion to how specific the matched entities are: a name linked to
    # most of the user's memories (the user's own name, a partner talked about in every episode)
    # singles nothing out, and at full weight it only promotes whatever mentions it — oldest first.
    entity_weight = min(2.0, legs["entity"]["specificity"]) if "entity" in legs else 0.0
    if options.mode == "rrf":
        score = sum(
            (min(1.0, entity_weight) if name == "entity" else 1.0) / (options.rrf_k + leg["rank"])
            for name, leg in legs.items()
            if leg["rank"] is not None
        )
        return score, legs
    # Weighted: text is whichever lexical leg ran (full text, else ILIKE); without vectors the
    # lexical score carries the whole weight so the minimum score still means something.
    text = legs.get("text", {}).get("normalized") or legs.get("like", {}).get("score") or 0.0
    vector = max(0.0, legs.get("vector", {}).get("similarity", 0.0))
    if use_vector and "text" in options.legs:
        # A document whose vector is not stored yet (just written) is scored on the legs it has: counting its
        # similarity as 0 put a fresh memory that names every word of the query under loosely related ones.
        score = options.vector_weight * vector + (1 - options.vector_weight) * text if "vector" in legs else text
    elif use_vector:  # vector leg alone: its similarity carries the whole weight, as text does without vectors
        score = vector
    else:
        score = text
    score += ENTITY_BONUS * entity_weight + (SPEAKER_BONUS if "speaker" in legs else 0.0)
    return score, legs


def search(
    conn: Conn,
    scope: Scope,
    query: str,
    *,
    query_vector: Sequence[float] | None = None,
    filters: SearchFilters | None = None,
    options: SearchOptions | None = None,
    touch: bool = False,
    large_user: bool = False,
) -> list[SearchResult]:
    """Search one user's memories (and transcript units). `query_vector` None = no vector leg; `large_user`: as
    search_reads.SearchReads read it."""
    results = search_many(conn, scope, [Ask(query, query_vector, filters)], options, large_user=large_user)[0][0]
    if touch:
        touch_accessed(conn, scope, [r.id for r in results if r.id is not None])
    return results


def search_many(
    conn: Conn,
    scope: Scope,
    asks: Sequence[Ask],
    options: SearchOptions | None = None,
    also: Mapping[str, Query] | None = None,
    *,
    large_user: bool = False,
) -> tuple[list[list[SearchResult]], dict[str, list[DictRow]]]:
    """Several searches of one user with the same options (a question, its parts, its time window), and other
    reads (`also`, by name), sent in one round trip: each statement still runs on its own, in order.
    `large_user`: as search_reads.SearchReads read it."""
    options = options or SearchOptions()
    statements = [
        search_statement(scope, ask.query, query_vector=ask.query_vector, filters=ask.filters, options=options)
        for ask in asks
    ]
    queries: dict[str, Query] = {}
    if any("qvec" in params for _, params in statements):
        # Keep scanning the HNSW graph until enough rows pass the user/memory filters: both settings are
        # transaction-local (as SET LOCAL) and sent with the searches, in the same round trip. So is the plan
        # choice for a large user (search_reads.LARGE_USER_CHUNKS): psycopg prepares a statement it has run five
        # times, and Postgres then reuses a generic plan made for an average user, the exact scan of the user's
        # rows; for a user that large, a plan of its own takes the HNSW index instead (docs/benchmarks.md,
        # "Search at scale"). Below, planning every search would cost more than it saves, and the server's own
        # plan_cache_mode stays.
        queries["settings"] = search_settings(options, large_user)
    queries.update({str(index): statement for index, statement in enumerate(statements)})
    queries.update({f"also:{name}": query for name, query in (also or {}).items()})
    rows = fetch_together(conn, queries)
    found = [_results(rows[str(index)], options, "qvec" in params) for index, (_, params) in enumerate(statements)]
    return found, {name: rows[f"also:{name}"] for name in also or {}}


def search_settings(options: SearchOptions, large_user: bool) -> Query:
    """The transaction-local settings a search with a vector leg is sent with (search_many says why)."""
    custom_plan = ", set_config('plan_cache_mode', 'force_custom_plan', true)" if large_user else ""
    ef_search = max(LARGE_USER_EF_SEARCH if large_user else 40, min(1000, fetch_size(options)))
    sql = (
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        f" set_config('hnsw.ef_search', %s, true){custom_plan}"
    )
    return sql, (str(ef_search),)


def _results(rows: Sequence[dict[str, Any]], options: SearchOptions, use_vector: bool) -> list[SearchResult]:
    fused = [(row, *_fuse(row, options, use_vector)) for row in rows]
    best = max((score for _, score, _ in fused), default=0.0)
    results = [
        _result(row, score, legs)
        for row, score, legs in fused
        if options.mode != "weighted" or score >= options.relative_floor * best - 1e-9
    ]
    results.sort(key=lambda r: (-r.score, r.id if r.id is not None else -(r.chunk_id or 0)))
    return results[: options.limit]


def transcript_result(row: Mapping[str, Any], score: float, legs: dict[str, dict[str, Any]]) -> SearchResult:
    """A transcript unit's result from a row naming it as the search statement does (unit_id, unit_session_id,
    message_id, said_at, speaker, message_content, session_key)."""
    return SearchResult(
        source="transcript",
        id=None,
        namespace="transcripts",
        key=f"session-{row['unit_session_id']}",
        value=row["message_content"],
        kind="transcript",
        score=score,
        legs=legs,
        chunk_id=row["unit_id"],
        session_id=row["unit_session_id"],
        created_at=row["said_at"],
        message_id=row["message_id"],
        speaker=row["speaker"],
        session_key=row["session_key"],
    )


def _result(row: dict[str, Any], score: float, legs: dict[str, dict[str, Any]]) -> SearchResult:
    if row["doc"] < 0:
        return transcript_result(row, score, legs)
    return SearchResult(
        source="memory",
        id=row["doc"],
        namespace=row["namespace"],
        key=row["key"],
        value=row["value"],
        kind=row["kind"],
        score=score,
        legs=legs,
        chunk_id=legs["vector"]["chunk_id"] if "vector" in legs else None,
        created_at=row["created_at"],
        event_time=row["event_time"],
        tags=list(row["tags"] or []),
        confidence=row["confidence"],
        valid_from=row["valid_from"],
        source_message_ids=list(row["source_message_ids"] or []),
        speaker=row["source_speaker"],
        session_key=row["source_session_key"],
    )
