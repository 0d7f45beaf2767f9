"""Hybrid search over a user's memories and session transcripts, fused in one SQL statement.

Legs:
- full text: an OR query over the question's lexemes, ranked by ts_rank. AND semantics
  (plainto_tsquery / websearch_to_tsquery) need every word of a natural-language question to
  match and so find almost nothing; OR + ts_rank keeps recall and lets rank order do the work.
- ILIKE: only when full text finds nothing (e.g. a query made of stop words or odd tokens).
- vector: cosine distance on memory chunks and transcript chunks, best chunk per memory. HNSW
  with pgvector 0.8 iterative scans, so filtering to one user (and the memory filters) still
  returns k rows even when the user owns a tiny share of the table.
- entity: memories linked to entities named in the query.

Fusion: `weighted` (vector similarity × w + max-normalised text score × (1 − w), plus a small
entity bonus, dropped below a minimum score) or `rrf` (Σ 1/(k + rank) over legs). Every result
carries each leg's rank and score so the ranking can be explained.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pgvector import Vector

from shared.db import Conn
from shared.memory.entity_extraction import query_entity_names
from shared.memory.keys import normalize_namespace
from shared.memory.store import Scope, touch_accessed

FusionMode = Literal["weighted", "rrf"]
# "text" is the lexical leg: full text, with the ILIKE fallback when full text finds nothing.
Leg = Literal["text", "vector", "entity"]
ALL_LEGS: tuple[Leg, ...] = ("text", "vector", "entity")

ENTITY_BONUS = 0.1  # weighted mode: added per matched entity leg hit (a tie-breaker, not a leg of its own)
_WORD = re.compile(r"[\w'-]{3,}", re.UNICODE)
_LIKE_STOPWORDS = frozenset(
    (
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "was",
        "were",
        "are",
        "you",
        "your",
        "have",
        "has",
        "had",
        "from",
        "about",
        "into",
        "over",
        "after",
        "before",
        "they",
        "them",
        "their",
        "there",
        "then",
        "than",
        "been",
        "being",
    )
)


@dataclass
class SearchFilters:
    namespace_prefix: str | None = None
    kinds: Sequence[str] | None = None
    tags: Sequence[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    exclude_session_id: int | None = None
    include_superseded: bool = False
    include_transcripts: bool = True


@dataclass
class SearchOptions:
    limit: int = 10
    mode: FusionMode = "weighted"
    rrf_k: int = 60
    vector_weight: float = 0.7
    min_score: float = 0.3
    overfetch: int = 8
    # Which legs run; the others are left out of the SQL entirely (evaluation of one leg, or a
    # caller that wants exact lexical matching only). The vector leg also needs a query vector.
    legs: tuple[Leg, ...] = ALL_LEGS


@dataclass
class SearchResult:
    source: Literal["memory", "transcript"]
    id: int | None  # memory id; None for a transcript block
    namespace: str
    key: str
    value: str
    kind: str
    score: float
    legs: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunk_id: int | None = None
    session_id: int | None = None
    created_at: datetime | None = None
    event_time: datetime | None = None
    tags: list[str] = field(default_factory=list)
    confidence: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "kind": self.kind,
            "score": round(self.score, 6),
            "legs": self.legs,
            "chunk_id": self.chunk_id,
            "session_id": self.session_id,
            "tags": self.tags,
            "confidence": self.confidence,
            "created_at": self.created_at,
            "event_time": self.event_time,
        }


def like_patterns(query: str, limit: int = 8) -> list[str]:
    words = [w.lower() for w in _WORD.findall(query) if w.lower() not in _LIKE_STOPWORDS]
    words = sorted(dict.fromkeys(words), key=len, reverse=True)[:limit]
    return ["%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for w in words]


def _memory_filter_sql(filters: SearchFilters, params: dict[str, Any], alias: str = "m") -> str:
    clauses = [f"{alias}.tenant_id = %(tenant)s", f"{alias}.user_id = %(user)s"]
    if not filters.include_superseded:
        clauses.append(f"{alias}.valid_until IS NULL")
    if filters.namespace_prefix:
        params["ns"] = normalize_namespace(filters.namespace_prefix)
        params["ns_like"] = params["ns"].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/%"
        clauses.append(f"({alias}.namespace = %(ns)s OR {alias}.namespace LIKE %(ns_like)s)")
    if filters.kinds:
        params["kinds"] = list(filters.kinds)
        clauses.append(f"{alias}.kind = ANY(%(kinds)s)")
    if filters.tags:
        params["tags"] = [t.casefold() for t in filters.tags]
        clauses.append(f"{alias}.tags @> %(tags)s")
    if filters.since:
        params["since"] = filters.since
        clauses.append(f"coalesce({alias}.event_time, {alias}.valid_from) >= %(since)s")
    if filters.until:
        params["until"] = filters.until
        clauses.append(f"coalesce({alias}.event_time, {alias}.valid_from) < %(until)s")
    if filters.exclude_session_id is not None:
        params["exclude_session"] = filters.exclude_session_id
        clauses.append(f"{alias}.source_session_id IS DISTINCT FROM %(exclude_session)s")
    return " AND ".join(clauses)


def _transcript_filter_sql(filters: SearchFilters, params: dict[str, Any]) -> str:
    """Transcript blocks have no namespace, kind or tags: a filter on those excludes them."""
    if not filters.include_transcripts or filters.namespace_prefix or filters.kinds or filters.tags:
        return "false"
    clauses = ["c.memory_id IS NULL"]
    if filters.exclude_session_id is not None:
        params["exclude_session"] = filters.exclude_session_id
        clauses.append("c.session_id <> %(exclude_session)s")
    if filters.since:
        params["since"] = filters.since
        clauses.append("c.created_at >= %(since)s")
    if filters.until:
        params["until"] = filters.until
        clauses.append("c.created_at < %(until)s")
    return " AND ".join(clauses)


def _build_sql(filters: SearchFilters, options: SearchOptions, params: dict[str, Any], use_vector: bool) -> str:
    memory_filter = _memory_filter_sql(filters, params)
    transcript_filter = _transcript_filter_sql(filters, params)
    # A disabled leg is a literal `false` in its WHERE clause, so the planner drops it outright.
    text_on = "true" if "text" in options.legs else "false"
    entity_on = "true" if "entity" in options.legs else "false"
    if use_vector:
        vector_cte = f"""
        vec_raw AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.memory_id, c.session_id, c.text,
                   c.embedding <=> %(qvec)s AS distance
            FROM memory_chunks c LEFT JOIN memories m ON m.id = c.memory_id
            WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user)s AND c.embedding IS NOT NULL
              AND ((c.memory_id IS NOT NULL AND {memory_filter}) OR ({transcript_filter}))
            ORDER BY c.embedding <=> %(qvec)s
            LIMIT %(fetch)s),
        vec_best AS (
            SELECT DISTINCT ON (coalesce(memory_id, -chunk_id)) * FROM vec_raw
            ORDER BY coalesce(memory_id, -chunk_id), distance),
        vec AS (
            SELECT *, 1 - distance AS similarity, row_number() OVER (ORDER BY distance, chunk_id) AS rank
            FROM vec_best),"""
    else:
        vector_cte = """
        vec AS (SELECT NULL::bigint AS chunk_id, NULL::bigint AS memory_id, NULL::bigint AS session_id,
                       NULL::text AS text, NULL::float8 AS distance, NULL::float8 AS similarity,
                       NULL::bigint AS rank WHERE false),"""
    return f"""
    WITH q AS (
        SELECT CASE WHEN lexemes IS NULL THEN NULL ELSE to_tsquery('simple', lexemes) END AS tsq
        FROM (SELECT string_agg(quote_literal(lexeme), ' | ') AS lexemes
              FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS lexeme) l),
    ft AS MATERIALIZED (
        SELECT m.id AS memory_id, ts_rank(m.search_tsv, q.tsq) AS score
        FROM memories m, q
        WHERE {text_on} AND q.tsq IS NOT NULL AND m.search_tsv @@ q.tsq AND {memory_filter}
        ORDER BY score DESC, m.id LIMIT %(fetch)s),
    ft_ranked AS (
        SELECT memory_id, score, score / nullif(max(score) OVER (), 0) AS normalized,
               row_number() OVER (ORDER BY score DESC, memory_id) AS rank
        FROM ft),
    like_leg AS (
        SELECT m.id AS memory_id,
               (SELECT count(*) FROM unnest(%(patterns)s::text[]) p
                WHERE m.value ILIKE p OR m.key ILIKE p)::float8 / greatest(cardinality(%(patterns)s::text[]), 1)
                   AS score
        FROM memories m
        WHERE {text_on} AND NOT EXISTS (SELECT 1 FROM ft) AND cardinality(%(patterns)s::text[]) > 0
          AND (m.value ILIKE ANY(%(patterns)s) OR m.key ILIKE ANY(%(patterns)s)) AND {memory_filter}
        ORDER BY score DESC, m.id LIMIT %(fetch)s),
    like_ranked AS (
        SELECT memory_id, score, row_number() OVER (ORDER BY score DESC, memory_id) AS rank FROM like_leg),
    {vector_cte}
    ent AS (
        SELECT me.memory_id, count(DISTINCT e.id) AS matches
        FROM entities e JOIN memory_entities me ON me.entity_id = e.id JOIN memories m ON m.id = me.memory_id
        WHERE {entity_on} AND e.tenant_id = %(tenant)s AND e.user_id = %(user)s
          AND (e.normalized_name = ANY(%(entities)s) OR e.aliases && %(entities)s) AND {memory_filter}
        GROUP BY me.memory_id ORDER BY matches DESC, me.memory_id LIMIT %(fetch)s),
    ent_ranked AS (SELECT memory_id, matches, row_number() OVER (ORDER BY matches DESC, memory_id) AS rank FROM ent),
    candidates AS (
        SELECT memory_id, NULL::bigint AS transcript_chunk FROM ft_ranked
        UNION SELECT memory_id, NULL FROM like_ranked
        UNION SELECT memory_id, NULL FROM ent_ranked
        UNION SELECT memory_id, CASE WHEN memory_id IS NULL THEN chunk_id END FROM vec)
    SELECT cand.memory_id, cand.transcript_chunk,
           ft_ranked.rank AS text_rank, ft_ranked.score AS text_score, ft_ranked.normalized AS text_normalized,
           like_ranked.rank AS like_rank, like_ranked.score AS like_score,
           vec.rank AS vector_rank, vec.similarity AS vector_similarity, vec.chunk_id AS vector_chunk_id,
           vec.text AS vector_chunk_text, vec.session_id AS vector_session_id,
           ent_ranked.rank AS entity_rank, ent_ranked.matches AS entity_matches,
           m.namespace, m.key, m.value, m.kind, m.tags, m.confidence, m.created_at, m.event_time
    FROM candidates cand
    LEFT JOIN ft_ranked ON ft_ranked.memory_id = cand.memory_id
    LEFT JOIN like_ranked ON like_ranked.memory_id = cand.memory_id
    LEFT JOIN ent_ranked ON ent_ranked.memory_id = cand.memory_id
    LEFT JOIN vec ON (cand.memory_id IS NOT NULL AND vec.memory_id = cand.memory_id)
                  OR (cand.memory_id IS NULL AND vec.chunk_id = cand.transcript_chunk)
    LEFT JOIN memories m ON m.id = cand.memory_id
    WHERE cand.memory_id IS NOT NULL OR cand.transcript_chunk IS NOT NULL
    """


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
    if row["entity_rank"] is not None:
        legs["entity"] = {"rank": row["entity_rank"], "matches": row["entity_matches"]}
    if options.mode == "rrf":
        score = sum(1.0 / (options.rrf_k + leg["rank"]) for leg in legs.values())
        return score, legs
    # Weighted: text is whichever lexical leg ran (full text, else ILIKE); without vectors the
    # lexical score carries the whole weight so the minimum score still means something.
    text = legs.get("text", {}).get("normalized") or legs.get("like", {}).get("score") or 0.0
    vector = max(0.0, legs.get("vector", {}).get("similarity", 0.0))
    if use_vector and "text" in options.legs:
        score = options.vector_weight * vector + (1 - options.vector_weight) * text
    elif use_vector:  # vector leg alone: its similarity carries the whole weight, as text does without vectors
        score = vector
    else:
        score = text
    if "entity" in legs:
        score += ENTITY_BONUS * min(2, legs["entity"]["matches"])
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
) -> list[SearchResult]:
    """Search one user's memories (and transcript blocks). `query_vector` None = no vector leg."""
    filters = filters or SearchFilters()
    options = options or SearchOptions()
    use_vector = query_vector is not None and "vector" in options.legs
    params: dict[str, Any] = {
        "tenant": scope.tenant_id,
        "user": scope.user_id,
        "query": query,
        "fetch": options.limit * options.overfetch,
        "patterns": like_patterns(query),
        "entities": query_entity_names(query),
    }
    if use_vector:
        params["qvec"] = Vector(list(query_vector or []))
        # Keep scanning the HNSW graph until enough rows pass the user/memory filters.
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        conn.execute(f"SET LOCAL hnsw.ef_search = {max(40, min(1000, int(params['fetch'])))}")
    rows = conn.execute(_build_sql(filters, options, params, use_vector), params).fetchall()
    results = []
    for row in rows:
        score, legs = _fuse(row, options, use_vector)
        if options.mode == "weighted" and score < options.min_score:
            continue
        if row["memory_id"] is None:
            results.append(
                SearchResult(
                    source="transcript",
                    id=None,
                    namespace="transcripts",
                    key=f"session-{row['vector_session_id']}",
                    value=row["vector_chunk_text"],
                    kind="transcript",
                    score=score,
                    legs=legs,
                    chunk_id=row["vector_chunk_id"],
                    session_id=row["vector_session_id"],
                )
            )
        else:
            results.append(
                SearchResult(
                    source="memory",
                    id=row["memory_id"],
                    namespace=row["namespace"],
                    key=row["key"],
                    value=row["value"],
                    kind=row["kind"],
                    score=score,
                    legs=legs,
                    chunk_id=row["vector_chunk_id"],
                    created_at=row["created_at"],
                    event_time=row["event_time"],
                    tags=list(row["tags"] or []),
                    confidence=row["confidence"],
                )
            )
    results.sort(key=lambda r: (-r.score, r.id or 0, r.chunk_id or 0))
    results = results[: options.limit]
    if touch:
        touch_accessed(conn, scope, [r.id for r in results if r.id is not None])
    return results
