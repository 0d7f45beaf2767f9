"""What the same person said just before and just after the best transcript hits.

A line that answers a question is often one of several a person says about it, with the other person's replies
between them: "I recently finished rereading The Alchemist" is followed, two messages on, by "I'm reading Dune
by Frank Herbert". The best AROUND_HITS transcript results of the first search bring the previous and the next
message their speaker said in the same session; those lines take the places right after the first
AROUND_AFTER results (a short result list, such as the API's default ten, is left as it was). They pass the
search's filters like any unit, and their lookup goes in the same round trip as the follow-up search
(follow_up.py), by the units' session index (migration 0023).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from shared.infra.db import DictRow, Query
from shared.memory.query_parts import in_rank_order, result_key
from shared.memory.rows import Scope
from shared.memory.search import transcript_result
from shared.memory.search_records import SearchFilters, SearchResult
from shared.memory.search_sql import transcript_filter_sql

AROUND_HITS: Final = 3
AROUND_AFTER: Final = 10


def around_query(scope: Scope, results: Sequence[SearchResult], filters: SearchFilters, limit: int) -> Query | None:
    """The lookup of the best transcript hits' speakers' lines around them, or None when it cannot add a place."""
    hits = [r.chunk_id for r in results if r.source == "transcript" and r.chunk_id is not None][:AROUND_HITS]
    if limit <= AROUND_AFTER or not hits:
        return None
    params: dict[str, Any] = {"tenant": scope.tenant_id, "user": scope.user_id, "hits": hits}
    passes = transcript_filter_sql(filters, params)
    same = "c.tenant_id = %(tenant)s AND c.user_id = %(user)s AND c.session_id = h.session_id AND c.speaker = h.speaker"
    sql = f"""
    SELECT n.id AS unit_id, n.session_id AS unit_session_id, n.message_id, n.said_at, n.speaker,
           sm.content AS message_content, s.session_key, hit.rank, n.after
    FROM unnest(%(hits)s::bigint[]) WITH ORDINALITY AS hit(id, rank)
    JOIN memory_chunks h ON h.id = hit.id AND h.tenant_id = %(tenant)s AND h.user_id = %(user)s
    CROSS JOIN LATERAL (
        (SELECT c.id, c.session_id, c.message_id, c.said_at, c.speaker, false AS after FROM memory_chunks c
         WHERE {same} AND c.message_id < h.message_id AND {passes}
         ORDER BY c.message_id DESC LIMIT 1)
        UNION ALL
        (SELECT c.id, c.session_id, c.message_id, c.said_at, c.speaker, true FROM memory_chunks c
         WHERE {same} AND c.message_id > h.message_id AND {passes}
         ORDER BY c.message_id LIMIT 1)) n
    JOIN session_messages sm ON sm.id = n.message_id AND sm.tenant_id = %(tenant)s AND sm.user_id = %(user)s
    JOIN sessions s ON s.id = n.session_id AND s.tenant_id = %(tenant)s AND s.user_id = %(user)s
    ORDER BY hit.rank, n.after"""
    return sql, params


def around_results(rows: Sequence[DictRow]) -> list[SearchResult]:
    return [transcript_result(row, 0.0, {"around": {"rank": None, "hit": int(row["rank"])}}) for row in rows]


def insert(results: Sequence[SearchResult], around: Sequence[SearchResult], limit: int) -> list[SearchResult]:
    """`results` with `around` right after the first AROUND_AFTER, each result once, at most `limit`. Scores are
    handed out again in rank order, as query_parts.take_turns does."""
    taken: dict[tuple[str, int], SearchResult] = {}
    for result in [*results[:AROUND_AFTER], *around, *results[AROUND_AFTER:]]:
        taken.setdefault(result_key(result), result)
    return in_rank_order(list(taken.values())[:limit], [r.score for r in results])
