"""Hybrid search over a user's memories and session transcripts, fused in one SQL statement.

Legs (`SearchOptions.legs` picks which run):
- full text: an OR query over the question's lexemes. AND semantics (plainto_tsquery /
  websearch_to_tsquery) need every word of a natural-language question to match and so find
  almost nothing; OR keeps recall and lets the ranking do the work. A memory scores
  Σ idf(word) × ts_rank(memory, word) over the query words it contains: plain ts_rank of an OR
  query scores one matched word the same whether it is in one memory or in all of them, so a
  question naming the user ("What did Caroline…") ranked every memory mentioning her alike. idf is
  BM25's, over the user's memories that pass the filters; ts_rank supplies a saturating term
  frequency and the label weights (TERM_WEIGHTS: key > value > metadata.context).
- ILIKE: only when full text finds nothing (e.g. a query made of stop words or odd tokens).
- vector: cosine distance on memory chunks and transcript chunks, best chunk per memory. HNSW
  with pgvector 0.8 iterative scans, so filtering to one user (and the memory filters) still
  returns k rows even when the user owns a tiny share of the table.
- entity: memories linked to entities named in the query, each entity weighted by its specificity
  (its idf over the user's memories, scaled to 0..1): the user's own name or a partner linked to
  half the memories singles nothing out.

Fusion: `weighted` (vector similarity × w + max-normalised text score × (1 − w), plus a small
entity bonus, dropped below a minimum score) or `rrf` (Σ 1/(k + rank) over legs). In weighted mode
every candidate gets its real vector similarity even if the vector leg did not return it (see
`vec_fill`). Every result carries each leg's rank and score so the ranking can be explained. The
statement scores the candidates too (`_score_sql`, the same formula as `_fuse`) and returns only the best
`limit` plus a margin, with their memories' text: the few hundred candidates never leave Postgres.

Measured on LoCoMo (ops/bench/locomo_retrieval.py, 5 conversations, recall@10, turns stored with
two turns before and one after as context): hybrid 0.76 with all of the above, against 0.61 with
plain ts_rank, no context, an unweighted entity leg and missing similarities counted as 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pgvector import Vector

from shared.db import Conn, Query, fetch_together
from shared.memory.entity_extraction import query_entity_names
from shared.memory.store import Scope, namespace_prefix_sql, touch_accessed
from shared.text import escape_like

FusionMode = Literal["weighted", "rrf"]
# "text" is the lexical leg: full text, with the ILIKE fallback when full text finds nothing.
Leg = Literal["text", "vector", "entity"]
ALL_LEGS: tuple[Leg, ...] = ("text", "vector", "entity")

# Weighted mode: added per matched entity, scaled by the entity's specificity (a tie-breaker, not a
# leg of its own). See `_fuse`.
ENTITY_BONUS = 0.1
# ts_rank weights by tsvector label, in its {D, C, B, A} order: the key (A) counts twice the value (B);
# context words (D, metadata.context — migration 0005) count 0.4 of a value word: they say what the
# memory is about, not what it says. C is unused.
TERM_WEIGHTS = (0.2, 0.2, 0.5, 1.0)
# Rows the statement returns beyond `limit` (at least; `limit` more when larger): it ranks by the same score
# as `_fuse`, computed in SQL, and Python has the last word on the rows it gets, so the margin only has to
# absorb rounding differences between the two at the cut.
KEEP_MARGIN = 10
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
    return ["%" + escape_like(w) + "%" for w in words]


def _memory_filter_sql(filters: SearchFilters, params: dict[str, Any], alias: str = "m", *, scoped: bool = True) -> str:
    """`scoped=False` leaves out the tenant/user test when the caller already scoped the rows it joins
    from: repeating it made the planner misjudge row counts (a full scan of `memories` for heavy users,
    measured by ops/bench/search_scale.py)."""
    clauses = [f"{alias}.tenant_id = %(tenant)s", f"{alias}.user_id = %(user)s"] if scoped else ["true"]
    if not filters.include_superseded:
        clauses.append(f"{alias}.valid_until IS NULL")
    if filters.namespace_prefix:
        clauses.append(namespace_prefix_sql(filters.namespace_prefix, params, alias))
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


def _idf(df: str) -> str:
    """BM25's inverse document frequency of something found in `df` of the `corpus.size` memories
    searched: ~ln(N) for a one-off word or name, near 0 for one in most memories. The difference is
    clamped at 0 because entity link counts also include memories the filters leave out."""
    return f"ln(1 + (greatest(corpus.size - ({df}), 0) + 0.5) / (({df}) + 0.5))"


def _build_sql(filters: SearchFilters, options: SearchOptions, params: dict[str, Any], use_vector: bool) -> str:
    memory_filter = _memory_filter_sql(filters, params)
    # Chunks carry their memory's tenant and user (copied at indexing), and vec_raw filters on them.
    chunk_memory_filter = _memory_filter_sql(filters, params, scoped=False)
    transcript_filter = _transcript_filter_sql(filters, params)
    # A disabled leg is a literal `false` in its WHERE clause, so the planner drops it outright.
    text_on = "true" if "text" in options.legs else "false"
    entity_on = "true" if "entity" in options.legs else "false"
    idf_terms, idf_entities = _idf("count(*)"), _idf("links.n")
    if use_vector:
        vector_cte = f"""
        vec_raw AS MATERIALIZED (
            SELECT c.id AS chunk_id, c.memory_id, c.session_id, c.text,
                   c.embedding <=> %(qvec)s AS distance
            FROM memory_chunks c LEFT JOIN memories m ON m.id = c.memory_id
            WHERE c.tenant_id = %(tenant)s AND c.user_id = %(user)s AND c.embedding IS NOT NULL
              AND ((c.memory_id IS NOT NULL AND {chunk_memory_filter}) OR ({transcript_filter}))
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
    if use_vector and options.mode == "weighted":
        # Weighted fusion adds up scores, so a candidate the vector leg did not rank (it came from
        # another leg) still gets its real similarity rather than 0: with truncated lists, a memory
        # just past the vector cut-off would otherwise lose the whole vector share of its score.
        # Exact distances on the chunks of a few hundred candidates, through the memory_id index.
        # (RRF fuses ranks, and a memory the leg did not return has no rank to give.)
        fill_cte = """
        vec_fill AS (
            SELECT DISTINCT ON (c.memory_id) c.memory_id, c.id AS chunk_id,
                   1 - (c.embedding <=> %(qvec)s) AS similarity
            FROM memory_chunks c JOIN candidates cand ON cand.memory_id = c.memory_id
            WHERE c.embedding IS NOT NULL AND NOT EXISTS (SELECT 1 FROM vec WHERE vec.memory_id = c.memory_id)
            ORDER BY c.memory_id, c.embedding <=> %(qvec)s)"""
    else:
        fill_cte = """
        vec_fill AS (SELECT NULL::bigint AS memory_id, NULL::bigint AS chunk_id, NULL::float8 AS similarity
                     WHERE false)"""
    # Full text in one pass: each (memory, query term) pair is tested once (ft_hits), by the term's lookup
    # in the GIN index or, for a user with few memories, by one join of their memories with the terms;
    # that gives both the term's document frequency (ft_terms) and its per-memory rank. Matching the OR
    # of all terms first and then testing every matched memory against every term, twice, cost a
    # conversation's whole memory set × terms in join filters whenever a common word (a partner's name)
    # matched all. q_terms is materialized: inlined, each term's tsquery was parsed again for every
    # memory it was tested against (~1 µs each) whenever the plan put the memories outside.
    # The vector rows join the candidates on one key, so that join hashes instead of looping.
    # Fusion is scored in SQL too, so only the best rows come back with their memory's text (`kept`):
    # building ~200 candidate rows in Python cost more than the statement's own fusion. `_fuse` stays
    # the authority on every returned row; `keep` leaves a margin so a last-digit difference between the
    # two computations cannot push a true top row out (see `KEEP_MARGIN`).
    min_score_sql = "score >= %(min_score)s - 1e-9" if options.mode == "weighted" else "true"
    return f"""
    WITH q_terms AS MATERIALIZED (
        SELECT lexeme, to_tsquery('simple', quote_literal(lexeme)) AS tsq
        FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS lexeme),
    corpus AS MATERIALIZED (
        SELECT count(*) AS size FROM memories m WHERE ({text_on} OR {entity_on}) AND {memory_filter}),
    ft_hits AS MATERIALIZED (
        SELECT m.id AS memory_id, t.lexeme, ts_rank(%(term_weights)s::float4[], m.search_tsv, t.tsq) AS tf
        FROM q_terms t JOIN memories m ON m.search_tsv @@ t.tsq
        WHERE {text_on} AND {memory_filter}),
    ft_terms AS MATERIALIZED (
        SELECT h.lexeme, {idf_terms} AS idf FROM ft_hits h CROSS JOIN corpus GROUP BY h.lexeme, corpus.size),
    ft AS MATERIALIZED (
        SELECT h.memory_id, sum(t.idf * h.tf) AS score
        FROM ft_hits h JOIN ft_terms t ON t.lexeme = h.lexeme
        GROUP BY h.memory_id),
    ft_ranked AS MATERIALIZED (
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
    ent_named AS MATERIALIZED (
        SELECT e.id, least(1.0, greatest(0.0, {idf_entities} / ln(2 + corpus.size))) AS specificity
        FROM entities e CROSS JOIN corpus
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM memory_entities x WHERE x.entity_id = e.id) links
        WHERE {entity_on} AND e.tenant_id = %(tenant)s AND e.user_id = %(user)s
          AND (e.normalized_name = ANY(%(entities)s) OR e.aliases && %(entities)s)),
    ent AS (
        SELECT me.memory_id, count(*) AS matches, sum(e.specificity) AS specificity
        FROM ent_named e JOIN memory_entities me ON me.entity_id = e.id JOIN memories m ON m.id = me.memory_id
        WHERE {memory_filter}
        GROUP BY me.memory_id ORDER BY specificity DESC, me.memory_id LIMIT %(fetch)s),
    ent_ranked AS (
        SELECT memory_id, matches, specificity, row_number() OVER (ORDER BY specificity DESC, memory_id) AS rank
        FROM ent),
    candidates AS MATERIALIZED (
        SELECT memory_id, NULL::bigint AS transcript_chunk FROM ft_ranked WHERE rank <= %(fetch)s
        UNION SELECT memory_id, NULL FROM like_ranked
        UNION SELECT memory_id, NULL FROM ent_ranked
        UNION SELECT memory_id, CASE WHEN memory_id IS NULL THEN chunk_id END FROM vec),
    {fill_cte},
    fused AS (
        SELECT cand.memory_id, cand.transcript_chunk,
               vec_fill.similarity AS fill_similarity, vec_fill.chunk_id AS fill_chunk_id,
               ft_ranked.rank AS text_rank, ft_ranked.score AS text_score, ft_ranked.normalized AS text_normalized,
               like_ranked.rank AS like_rank, like_ranked.score AS like_score,
               vec.rank AS vector_rank, vec.similarity AS vector_similarity, vec.chunk_id AS vector_chunk_id,
               vec.text AS vector_chunk_text, vec.session_id AS vector_session_id,
               ent_ranked.rank AS entity_rank, ent_ranked.matches AS entity_matches,
               ent_ranked.specificity AS entity_specificity,
               {_score_sql(options, use_vector)} AS score
        FROM candidates cand
        LEFT JOIN ft_ranked ON ft_ranked.memory_id = cand.memory_id
        LEFT JOIN like_ranked ON like_ranked.memory_id = cand.memory_id
        LEFT JOIN ent_ranked ON ent_ranked.memory_id = cand.memory_id
        LEFT JOIN vec ON coalesce(vec.memory_id, -vec.chunk_id) = coalesce(cand.memory_id, -cand.transcript_chunk)
        LEFT JOIN vec_fill ON vec_fill.memory_id = cand.memory_id
        WHERE cand.memory_id IS NOT NULL OR cand.transcript_chunk IS NOT NULL),
    kept AS (
        SELECT * FROM fused WHERE {min_score_sql}
        ORDER BY score DESC, coalesce(memory_id, 0), coalesce(vector_chunk_id, fill_chunk_id, 0)
        LIMIT %(keep)s)
    SELECT kept.*, m.namespace, m.key, m.value, m.kind, m.tags, m.confidence, m.created_at, m.event_time
    FROM kept LEFT JOIN memories m ON m.id = kept.memory_id
    """


def _score_sql(options: SearchOptions, use_vector: bool) -> str:
    """`_fuse`'s score as an SQL expression over the fused row's legs (keep the two in step)."""
    # least() skips NULLs (least(2.0, NULL) is 2.0): a candidate without the entity leg is tested first.
    entity_weight = (
        "(CASE WHEN ent_ranked.rank IS NULL THEN 0.0"
        " ELSE least(2.0, round(ent_ranked.specificity::numeric, 4))::float8 END)"
    )
    if options.mode == "rrf":
        return (
            "coalesce(1.0::float8 / (%(rrf_k)s + ft_ranked.rank), 0.0)"
            " + coalesce(1.0::float8 / (%(rrf_k)s + like_ranked.rank), 0.0)"
            " + coalesce(1.0::float8 / (%(rrf_k)s + vec.rank), 0.0)"
            f" + coalesce(least(1.0, {entity_weight}) / (%(rrf_k)s + ent_ranked.rank), 0.0)"
        )
    text = "coalesce(nullif(ft_ranked.normalized, 0), nullif(like_ranked.score, 0), 0.0)"
    vector = "greatest(0.0, coalesce(vec.similarity, vec_fill.similarity, 0.0))"
    if use_vector and "text" in options.legs:
        score = f"%(vector_weight)s * {vector} + (1 - %(vector_weight)s) * {text}"
    elif use_vector:
        score = vector
    else:
        score = text
    return f"{score} + {ENTITY_BONUS} * {entity_weight}"


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
        score = options.vector_weight * vector + (1 - options.vector_weight) * text
    elif use_vector:  # vector leg alone: its similarity carries the whole weight, as text does without vectors
        score = vector
    else:
        score = text
    score += ENTITY_BONUS * entity_weight
    return score, legs


def search_statement(
    scope: Scope,
    query: str,
    *,
    query_vector: Sequence[float] | None = None,
    filters: SearchFilters | None = None,
    options: SearchOptions | None = None,
) -> tuple[str, dict[str, Any]]:
    """The hybrid statement `search` runs and its parameters (also for EXPLAIN in tests and benches)."""
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
        "term_weights": list(TERM_WEIGHTS),
        "keep": options.limit + max(options.limit, KEEP_MARGIN),
        "min_score": options.min_score,
        "vector_weight": options.vector_weight,
        "rrf_k": options.rrf_k,
    }
    if use_vector:
        params["qvec"] = Vector(list(query_vector or []))
    return _build_sql(filters, options, params, use_vector), params


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
    options = options or SearchOptions()
    sql, params = search_statement(scope, query, query_vector=query_vector, filters=filters, options=options)
    use_vector = "qvec" in params  # the statement has a vector leg
    if use_vector:
        # Keep scanning the HNSW graph until enough rows pass the user/memory filters: both settings are
        # transaction-local (as SET LOCAL) and sent with the search, one round trip for the two statements.
        settings: Query = (
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', %s, true)",
            (str(max(40, min(1000, int(params["fetch"])))),),
        )
        rows = fetch_together(conn, {"settings": settings, "search": (sql, params)})["search"]
    else:
        rows = conn.execute(sql, params).fetchall()
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
                    chunk_id=legs["vector"]["chunk_id"] if "vector" in legs else None,
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
