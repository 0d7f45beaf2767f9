"""What a search reads before it searches: the embedding space its query vector must match, who speaks in the
user's conversations, and whether the user is large enough for searches planned for them alone.

Knowing the speakers before the first statement lets a question's names be read out of it up front
(query_parts): the vector is asked what the question is about without the names of the people in it, and a
question about several people sends its per-person searches with the first one. Neither read depends on the
query, so a caller with reads of its own (a turn's context, the context block) sends `search_read_queries` with
them in one round trip and hands the rows over (`SearchReads.from_rows`); other callers get both in one round
trip of their own (`read_before_search`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from shared.embeddings import SPACE_QUERY
from shared.infra.db import Conn, DictRow, Query, fetch_together
from shared.memory.rows import Scope

# Speakers read per user, in name order. A person past this many is still found by words and vectors; the
# question is then searched with their name in it, as for a name nobody in the conversations has.
MOST_SPEAKERS: Final = 200
# Chunks (memories and transcript units) from which a user's searches are planned for that user (search_many).
LARGE_USER_CHUNKS = 5000
_SPACE, _SPEAKERS, _LARGE = "search:space", "search:speakers", "search:large"


@dataclass(frozen=True)
class SearchReads:
    space: Sequence[Mapping[str, Any]]  # SPACE_QUERY's rows
    speakers: tuple[str, ...]  # who speaks in the user's transcript units, role labels included
    large_user: bool = False  # at least LARGE_USER_CHUNKS chunks

    @classmethod
    def from_rows(cls, rows: Mapping[str, Sequence[DictRow]]) -> SearchReads:
        """From the rows of `search_read_queries`, fetched along with a caller's other reads."""
        speakers = tuple(str(row["speaker"]) for row in rows[_SPEAKERS])
        return cls(rows[_SPACE], speakers, bool(rows[_LARGE][0]["large"]))


def search_read_queries(scope: Scope) -> dict[str, Query]:
    """The reads, by names no caller's own reads use."""
    return {_SPACE: SPACE_QUERY, _SPEAKERS: speakers_query(scope), _LARGE: large_user_query(scope)}


def read_before_search(conn: Conn, scope: Scope) -> SearchReads:
    return SearchReads.from_rows(fetch_together(conn, search_read_queries(scope)))


def speakers_query(scope: Scope) -> Query:
    """The user's distinct speakers by a skip scan of the units' (user_id, speaker) index (migration 0024): one
    index step per person, however many lines each said."""
    units = "c.tenant_id = %(tenant)s AND c.user_id = %(user)s AND c.message_id IS NOT NULL"
    sql = f"""
    WITH RECURSIVE people AS (
        (SELECT c.speaker FROM memory_chunks c WHERE {units} AND c.speaker IS NOT NULL ORDER BY c.speaker LIMIT 1)
        UNION ALL
        SELECT (SELECT c.speaker FROM memory_chunks c WHERE {units} AND c.speaker > p.speaker
                ORDER BY c.speaker LIMIT 1)
        FROM people p WHERE p.speaker IS NOT NULL)
    SELECT speaker FROM people WHERE speaker IS NOT NULL LIMIT %(most)s"""
    return sql, {"tenant": scope.tenant_id, "user": scope.user_id, "most": MOST_SPEAKERS}


def large_user_query(scope: Scope) -> Query:
    """Whether the user has LARGE_USER_CHUNKS chunks: a count that stops there, read from the user_id index."""
    sql = """SELECT count(*) >= %(most)s AS large FROM (
                 SELECT 1 FROM memory_chunks WHERE tenant_id = %(tenant)s AND user_id = %(user)s LIMIT %(most)s) c"""
    return sql, {"tenant": scope.tenant_id, "user": scope.user_id, "most": LARGE_USER_CHUNKS}
