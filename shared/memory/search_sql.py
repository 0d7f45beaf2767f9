"""The hybrid search statement: every leg, their fusion and the cut, in one SQL statement (see shared.memory.search
for what each leg does and why), and the scoring constants `_fuse` shares with it."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from pgvector import Vector

from shared.memory.entity_extraction import query_entity_names
from shared.memory.reads import namespace_prefix_sql
from shared.memory.rows import Scope, memory_source_sql
from shared.memory.search_records import SearchFilters, SearchOptions
from shared.text import clean_text, escape_like

# Weighted mode: added per matched entity, scaled by the entity's specificity (a tie-breaker, not a
# leg of its own). See `_fuse`.
ENTITY_BONUS = 0.1
# Weighted mode: added to a transcript unit whose speaker the query names. A question about a person
# ("What activities has Melanie done with her family?") is mostly answered by what that person said; in a
# conversation between two people their name is in every other message's speaker label, so full text
# gives it almost no weight.
SPEAKER_BONUS = 0.1
# ts_rank weights by tsvector label, in its {D, C, B, A} order: the key (A) counts twice the value (B);
# context words (D, metadata.context — migration 0005) count 0.4 of a value word: they say what the
# memory is about, not what it says. C is unused.
TERM_WEIGHTS = (0.2, 0.2, 0.5, 1.0)
# Rows the statement returns beyond `limit` (at least; a tenth of `limit` when larger): it ranks by the same
# score as `_fuse`, computed in SQL, and Python has the last word on the rows it gets, so the margin only has
# to absorb rounding differences between the two at the cut.
KEEP_MARGIN = 10
MAX_FETCH = 320
# Bounds that only a very large user reaches, so a search costs what the leg's matches cost rather than what the
# user's whole history does (docs/benchmarks.md, "Search at scale"). Full text's document count (BM25's N) stops
# at CORPUS_COUNT_CAP: past it a term's weight is read against that many documents, which keeps rare terms above
# common ones and only flattens terms in more documents than that. The substring leg, run when full text finds
# nothing, reads the newest LIKE_SCAN_CAP memories of the user: without an index to answer ILIKE, it would
# otherwise test every one.
CORPUS_COUNT_CAP = 20000
LIKE_SCAN_CAP = 10000
_WORD = re.compile(r"[\w'-]{3,}", re.UNICODE)
# Runs of what is neither a word nor a space; those holding a symbol (category So: emoji, ©, ✓) are searched
# for as they are, modifiers and joiners included.
_SYMBOLS = re.compile(r"[^\w\s]+", re.UNICODE)
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


def like_patterns(query: str, limit: int = 8) -> list[str]:
    """Substrings for the ILIKE fallback: the query's longer words, and its symbols (an emoji is no lexeme of
    full text, but "🎻" in a memory is what a search for it means)."""
    symbols = [run for run in _SYMBOLS.findall(query) if any(unicodedata.category(ch) == "So" for ch in run)]
    words = [w.lower() for w in _WORD.findall(query) if w.lower() not in _LIKE_STOPWORDS] + symbols
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


def transcript_filter_sql(filters: SearchFilters, params: dict[str, Any]) -> str:
    """Transcript units (alias c) that pass the filters. They have no namespace, kind or tags: a filter on
    those excludes them. Their time is when the message was said."""
    if not filters.include_transcripts or filters.namespace_prefix or filters.kinds or filters.tags:
        return "false"
    clauses = ["c.message_id IS NOT NULL"]
    if filters.exclude_session_id is not None:
        params["exclude_session"] = filters.exclude_session_id
        clauses.append("c.session_id <> %(exclude_session)s")
    if filters.since:
        params["since"] = filters.since
        clauses.append("c.said_at >= %(since)s")
    if filters.until:
        params["until"] = filters.until
        clauses.append("c.said_at < %(until)s")
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
    transcript_filter = transcript_filter_sql(filters, params)
    source_columns, source_joins = memory_source_sql("m")  # a memory's session and speaker, as excerpts have theirs
    # A disabled leg is a literal `false` in its WHERE clause, so the planner drops it outright.
    text_on = "true" if "text" in options.legs else "false"
    entity_on = "true" if "entity" in options.legs else "false"
    idf_terms, idf_entities = _idf("count(*)"), _idf("links.n")
    units = "c.tenant_id = %(tenant)s AND c.user_id = %(user)s"
    if use_vector:
        vector_cte = f"""
        vec_raw AS MATERIALIZED (
            SELECT c.id AS chunk_id, coalesce(c.memory_id, -c.id) AS doc, c.embedding <=> %(qvec)s AS distance
            FROM memory_chunks c LEFT JOIN memories m ON m.id = c.memory_id
            WHERE {units} AND c.embedding IS NOT NULL
              AND ((c.memory_id IS NOT NULL AND {chunk_memory_filter}) OR ({transcript_filter}))
            ORDER BY c.embedding <=> %(qvec)s
            LIMIT %(fetch)s),
        vec_best AS (
            SELECT DISTINCT ON (doc) * FROM vec_raw ORDER BY doc, distance),
        vec AS (
            SELECT *, 1 - distance AS similarity, row_number() OVER (ORDER BY distance, chunk_id) AS rank
            FROM vec_best),"""
    else:
        vector_cte = """
        vec AS (SELECT NULL::bigint AS chunk_id, NULL::bigint AS doc, NULL::float8 AS distance,
                       NULL::float8 AS similarity, NULL::bigint AS rank WHERE false),"""
    if use_vector and options.mode == "weighted":
        # Weighted fusion adds up scores, so a candidate the vector leg did not rank (it came from
        # another leg) still gets its real similarity rather than 0: with truncated lists, a document
        # just past the vector cut-off would otherwise lose the whole vector share of its score.
        # Exact distances on the chunks of a few hundred candidates: a memory's through the memory_id
        # index, a unit's own row by its id. (RRF fuses ranks, and a document the leg did not return
        # has no rank to give.)
        fill_cte = """
        unranked AS (
            SELECT doc FROM candidates cand WHERE NOT EXISTS (SELECT 1 FROM vec WHERE vec.doc = cand.doc)),
        vec_fill AS (
            SELECT DISTINCT ON (f.doc) f.doc, f.chunk_id, f.similarity FROM (
                SELECT cand.doc, c.id AS chunk_id, 1 - (c.embedding <=> %(qvec)s) AS similarity
                FROM unranked cand JOIN memory_chunks c ON c.memory_id = cand.doc
                WHERE cand.doc > 0 AND c.embedding IS NOT NULL
                UNION ALL
                SELECT cand.doc, c.id, 1 - (c.embedding <=> %(qvec)s)
                FROM unranked cand JOIN memory_chunks c ON c.id = -cand.doc
                WHERE cand.doc < 0 AND c.embedding IS NOT NULL) f
            ORDER BY f.doc, f.similarity DESC, f.chunk_id)"""
    else:
        fill_cte = """
        vec_fill AS (SELECT NULL::bigint AS doc, NULL::bigint AS chunk_id, NULL::float8 AS similarity WHERE false)"""
    # Full text in one pass: each (document, query term) pair is tested once (ft_hits), by the term's lookup
    # in the GIN index or, for a user with few documents, by one join of their documents with the terms;
    # that gives both the term's document frequency (ft_terms) and its per-document rank. q_terms is
    # materialized: inlined, each term's tsquery was parsed again for every document it was tested against.
    # The vector rows join the candidates on one key, so that join hashes instead of looping. Chunk rows are wide
    # (their vectors), so they are never scanned whole: the corpus count is on the user alone (user ids are
    # unique across tenants), which the units' (user_id, said_at) index answers by itself, and a unit
    # candidate's speaker is looked up by its id (`named`).
    # Fusion is scored in SQL too, so only the best rows come back with their text (`kept`); `_fuse` stays
    # the authority on every returned row, and `keep` leaves a margin (see `KEEP_MARGIN`).
    floor_sql = "score >= %(floor)s * best - 1e-9" if options.mode == "weighted" else "true"
    return f"""
    WITH q_terms AS MATERIALIZED (
        SELECT lexeme, to_tsquery('simple', quote_literal(lexeme)) AS tsq
        FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS lexeme),
    corpus AS MATERIALIZED (
        SELECT (SELECT count(*) FROM (SELECT FROM memories m WHERE ({text_on} OR {entity_on}) AND {memory_filter}
                                      LIMIT %(corpus_cap)s) counted)
             + (SELECT count(*) FROM (SELECT FROM memory_chunks c
                                      WHERE {text_on} AND c.user_id = %(user)s AND {transcript_filter}
                                      LIMIT %(corpus_cap)s) counted)
               AS size),
    ft_hits AS MATERIALIZED (
        SELECT m.id AS doc, t.lexeme, ts_rank(%(term_weights)s::float4[], m.search_tsv, t.tsq) AS tf
        FROM q_terms t JOIN memories m ON m.search_tsv @@ t.tsq
        WHERE {text_on} AND {memory_filter}
        UNION ALL
        SELECT -c.id, t.lexeme, ts_rank(%(term_weights)s::float4[], c.search_tsv, t.tsq)
        FROM q_terms t JOIN memory_chunks c ON c.search_tsv @@ t.tsq
        WHERE {text_on} AND {units} AND {transcript_filter}),
    ft_terms AS MATERIALIZED (
        SELECT h.lexeme, {idf_terms} AS idf FROM ft_hits h CROSS JOIN corpus GROUP BY h.lexeme, corpus.size),
    ft AS MATERIALIZED (
        SELECT h.doc, sum(t.idf * h.tf) AS score
        FROM ft_hits h JOIN ft_terms t ON t.lexeme = h.lexeme
        GROUP BY h.doc),
    ft_ranked AS MATERIALIZED (
        SELECT doc, score, score / nullif(max(score) OVER (), 0) AS normalized,
               row_number() OVER (ORDER BY score DESC, doc) AS rank
        FROM ft),
    like_leg AS (
        SELECT m.id AS doc,
               (SELECT count(*) FROM unnest(%(patterns)s::text[]) p
                WHERE m.value ILIKE p OR m.key ILIKE p)::float8 / greatest(cardinality(%(patterns)s::text[]), 1)
                   AS score
        FROM (SELECT m.id, m.key, m.value FROM memories m
              WHERE {text_on} AND NOT EXISTS (SELECT 1 FROM ft) AND cardinality(%(patterns)s::text[]) > 0
                AND {memory_filter}
              ORDER BY m.created_at DESC, m.id DESC LIMIT %(like_scan)s) m
        WHERE m.value ILIKE ANY(%(patterns)s) OR m.key ILIKE ANY(%(patterns)s)
        ORDER BY score DESC, m.id LIMIT %(fetch)s),
    like_ranked AS (
        SELECT doc, score, row_number() OVER (ORDER BY score DESC, doc) AS rank FROM like_leg),
    {vector_cte}
    ent_named AS MATERIALIZED (
        SELECT e.id, least(1.0, greatest(0.0, {idf_entities} / ln(2 + corpus.size))) AS specificity
        FROM entities e CROSS JOIN corpus
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM memory_entities x WHERE x.entity_id = e.id) links
        WHERE {entity_on} AND e.tenant_id = %(tenant)s AND e.user_id = %(user)s
          AND (e.normalized_name = ANY(%(entities)s) OR e.aliases && %(entities)s)),
    ent AS (
        SELECT me.memory_id AS doc, count(*) AS matches, sum(e.specificity) AS specificity
        FROM ent_named e JOIN memory_entities me ON me.entity_id = e.id JOIN memories m ON m.id = me.memory_id
        WHERE {memory_filter}
        GROUP BY me.memory_id ORDER BY specificity DESC, me.memory_id LIMIT %(fetch)s),
    ent_ranked AS (
        SELECT doc, matches, specificity, row_number() OVER (ORDER BY specificity DESC, doc) AS rank FROM ent),
    candidates AS MATERIALIZED (
        SELECT doc FROM ft_ranked WHERE rank <= %(fetch)s
        UNION SELECT doc FROM like_ranked
        UNION SELECT doc FROM ent_ranked
        UNION SELECT doc FROM vec),
    speakers AS MATERIALIZED (
        -- Who said a unit candidate, looked up by its id only when the query names someone (a scalar subquery,
        -- so the planner cannot turn it into a scan of every chunk).
        SELECT doc, CASE WHEN doc < 0 AND cardinality(%(entities)s::text[]) > 0
                    THEN (SELECT x.speaker FROM memory_chunks x WHERE x.id = -doc) END AS speaker
        FROM candidates),
    named AS (
        SELECT doc, speaker, coalesce(lower(speaker) = ANY(%(entities)s), false) AS speaker_named FROM speakers),
    {fill_cte},
    fused AS (
        SELECT cand.doc,
               vec_fill.similarity AS fill_similarity, vec_fill.chunk_id AS fill_chunk_id,
               ft_ranked.rank AS text_rank, ft_ranked.score AS text_score, ft_ranked.normalized AS text_normalized,
               like_ranked.rank AS like_rank, like_ranked.score AS like_score,
               vec.rank AS vector_rank, vec.similarity AS vector_similarity, vec.chunk_id AS vector_chunk_id,
               ent_ranked.rank AS entity_rank, ent_ranked.matches AS entity_matches,
               ent_ranked.specificity AS entity_specificity,
               cand.speaker_named,
               {_score_sql(options, use_vector)} AS score
        FROM named cand
        LEFT JOIN ft_ranked ON ft_ranked.doc = cand.doc
        LEFT JOIN like_ranked ON like_ranked.doc = cand.doc
        LEFT JOIN ent_ranked ON ent_ranked.doc = cand.doc
        LEFT JOIN vec ON vec.doc = cand.doc
        LEFT JOIN vec_fill ON vec_fill.doc = cand.doc
        WHERE cand.doc IS NOT NULL),
    kept AS (
        SELECT * FROM (SELECT *, max(score) OVER () AS best FROM fused) f WHERE {floor_sql}
        ORDER BY score DESC, doc
        LIMIT %(keep)s)
    SELECT kept.*,
           m.namespace, m.key, m.value, m.kind, m.tags, m.confidence, m.created_at, m.event_time,
           m.valid_from, m.source_message_ids,
           u.id AS unit_id, u.session_id AS unit_session_id, u.message_id, u.said_at, u.speaker,
           sm.content AS message_content, s.session_key,
           {source_columns}
    FROM kept
    LEFT JOIN memories m ON kept.doc > 0 AND m.id = kept.doc
    LEFT JOIN memory_chunks u ON kept.doc < 0 AND u.id = -kept.doc
    LEFT JOIN session_messages sm ON sm.id = u.message_id
    LEFT JOIN sessions s ON s.id = u.session_id
    {source_joins}
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
        # A document whose vector is not stored yet (just written) is scored on the legs it has.
        score = (
            f"(CASE WHEN coalesce(vec.similarity, vec_fill.similarity) IS NULL THEN {text}"
            f" ELSE %(vector_weight)s * {vector} + (1 - %(vector_weight)s) * {text} END)"
        )
    elif use_vector:
        score = vector
    else:
        score = text
    speaker = f"(CASE WHEN cand.speaker_named THEN {SPEAKER_BONUS} ELSE 0.0 END)"
    return f"{score} + {ENTITY_BONUS} * {entity_weight} + {speaker}"


def fetch_size(options: SearchOptions) -> int:
    """Rows each leg fetches: `overfetch` times the limit for small limits, at least twice the limit and no more
    than MAX_FETCH for large ones (a context block asks for a hundred results; eight hundred candidates a leg
    cost more than they add)."""
    return max(2 * options.limit, min(options.limit * options.overfetch, MAX_FETCH))


def search_statement(
    scope: Scope,
    query: str,
    *,
    query_vector: Sequence[float] | None = None,
    filters: SearchFilters | None = None,
    options: SearchOptions | None = None,
) -> tuple[str, dict[str, Any]]:
    """The hybrid statement `search` runs and its parameters (also for EXPLAIN in tests and benches)."""
    query = clean_text(query)
    filters = filters or SearchFilters()
    options = options or SearchOptions()
    use_vector = query_vector is not None and "vector" in options.legs
    params: dict[str, Any] = {
        "tenant": scope.tenant_id,
        "user": scope.user_id,
        "query": query,
        "fetch": fetch_size(options),
        "patterns": like_patterns(query),
        "entities": query_entity_names(query),
        "term_weights": list(TERM_WEIGHTS),
        "keep": options.limit + max(KEEP_MARGIN, options.limit // 10),
        "floor": options.relative_floor,
        "vector_weight": options.vector_weight,
        "rrf_k": options.rrf_k,
        "corpus_cap": CORPUS_COUNT_CAP,
        "like_scan": LIKE_SCAN_CAP,
    }
    if use_vector:
        params["qvec"] = Vector(list(query_vector or []))
    return _build_sql(filters, options, params, use_vector), params
