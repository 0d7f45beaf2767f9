"""The lines a speaker said around the best hits take the places right after the first ten."""

from __future__ import annotations

from shared.memory.rows import Scope
from shared.memory.search import SearchFilters, SearchResult
from shared.memory.speaker_lines import AROUND_AFTER, around_query, insert


def unit(chunk_id: int, score: float = 0.5) -> SearchResult:
    return SearchResult("transcript", None, "transcripts", "session-1", "t", "transcript", score, chunk_id=chunk_id)


def memory(memory_id: int) -> SearchResult:
    return SearchResult("memory", memory_id, "default", f"k{memory_id}", "v", "fact", 0.5)


def test_the_lines_come_right_after_the_first_ten_each_once_and_scores_keep_the_order() -> None:
    results = [unit(n, score=1 - n / 100) for n in range(1, 21)]
    merged = insert(results, [unit(101), unit(5), unit(15)], 14)
    assert [r.chunk_id for r in merged] == [*range(1, 11), 101, 15, 11, 12]
    assert [r.score for r in merged] == sorted((r.score for r in merged), reverse=True)


def test_no_lookup_when_no_place_would_change_or_no_transcript_hit() -> None:
    scope = Scope(1, 1)
    assert around_query(scope, [unit(1)], SearchFilters(), AROUND_AFTER) is None
    assert around_query(scope, [memory(1), memory(2)], SearchFilters(), 50) is None
    query = around_query(scope, [memory(1), unit(7), unit(8), unit(9), unit(10)], SearchFilters(), 50)
    assert query is not None and query[1]["hits"] == [7, 8, 9]


def test_a_filter_that_leaves_transcripts_out_finds_no_line() -> None:
    query = around_query(Scope(1, 1), [unit(7)], SearchFilters(kinds=["fact"]), 50)
    assert query is not None and "AND false" in query[0]
