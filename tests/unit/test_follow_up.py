"""The best hit's follow-up search takes every fifth place after the first three, each result once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.memory.follow_up import FOLLOW_AFTER, FOLLOW_EVERY, FOLLOW_WORDS, follow_up_query, merge
from shared.memory.search import SearchResult


def unit(chunk_id: int, score: float = 0.5, value: str = "text") -> SearchResult:
    return SearchResult("transcript", None, "transcripts", "session-1", value, "transcript", score, chunk_id=chunk_id)


def test_the_first_results_keep_their_places_and_the_follow_up_takes_every_fifth_after_them() -> None:
    first = [unit(n, score=1 - n / 100) for n in range(1, 13)]
    follow = [unit(1), unit(2), unit(101), unit(102)]  # the best hit itself comes back first: taken once
    merged = merge(first, follow, 10)
    assert [r.chunk_id for r in merged] == [1, 2, 3, 4, 5, 6, 7, 101, 8, 9]
    assert [r.score for r in merged] == sorted((r.score for r in merged), reverse=True)


def test_a_short_first_pass_is_filled_from_the_follow_up() -> None:
    merged = merge([unit(1), unit(2)], [unit(7), unit(8), unit(9)], 10)
    assert [r.chunk_id for r in merged] == [1, 2, 7, 8, 9]


def test_the_follow_up_query_is_the_question_with_the_best_hits_words() -> None:
    best = unit(1, value=" ".join(f"w{n}" for n in range(200)))
    query = follow_up_query("What area was hit by a flood?", [best, unit(2, value="other")])
    assert query is not None and query.startswith("What area was hit by a flood? w0 w1")
    assert len(query.split()) == 7 + FOLLOW_WORDS
    assert follow_up_query("anything", []) is None


@given(
    st.lists(st.integers(1, 40), max_size=30, unique=True),
    st.lists(st.integers(1, 60), max_size=30, unique=True),
    st.integers(1, 40),
)
def test_each_result_once_the_first_ones_first_and_never_over_the_limit(
    first_ids: list[int], follow_ids: list[int], limit: int
) -> None:
    first = [unit(n) for n in first_ids]
    merged = merge(first, [unit(n) for n in follow_ids], limit)
    ids = [r.chunk_id for r in merged]
    assert len(ids) == len(set(ids)) == min(limit, len(set(first_ids) | set(follow_ids)))
    kept = min(FOLLOW_AFTER, limit, len(first_ids))
    assert ids[:kept] == first_ids[:kept]
    # While the first pass has results left, the follow-up takes a place only when it is its turn.
    own = set(first_ids)
    for place, chunk_id in enumerate(ids):
        if chunk_id not in own and any(later in own for later in ids[place + 1 :]):
            assert place >= FOLLOW_AFTER and (place - FOLLOW_AFTER) % FOLLOW_EVERY == FOLLOW_EVERY - 1
