"""A question about several people is asked once per person, and the searches take turns."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.memory.query_parts import named_speakers, parts, take_turns, what_is_asked, without_names
from shared.memory.search import SearchResult


def unit(chunk_id: int, speaker: str | None = None, score: float = 0.5) -> SearchResult:
    return SearchResult("transcript", None, "transcripts", "session-1", "text", "transcript", score,
                        chunk_id=chunk_id, speaker=speaker)  # fmt: skip


def memory(memory_id: int, score: float = 0.5) -> SearchResult:
    return SearchResult("memory", memory_id, "default", f"k{memory_id}", "v", "fact", score)


@pytest.mark.parametrize(
    ("query", "removed", "expected"),
    [
        ("What volunteering have John and Maria both done?", ["Maria"], "What volunteering have John both done?"),
        ("What volunteering have John and Maria both done?", ["John"], "What volunteering have Maria both done?"),
        ("What are Maria's and John's plans?", ["Maria"], "What are John's plans?"),
        (
            "When did Caroline and Melanie go camping, and where?",
            ["Caroline"],
            "When did Melanie go camping, and where?",
        ),
        ("What did Ann, Bob and Carl eat?", ["Ann", "Carl"], "What did Bob eat?"),
        ("what did ann and bob cook?", ["Ann"], "what did bob cook?"),
    ],
)
def test_a_part_keeps_the_question_without_the_other_names(query: str, removed: list[str], expected: str) -> None:
    assert without_names(query, removed) == expected


def test_parts_are_one_per_speaker_the_question_names() -> None:
    found = ["John", "Maria", "Tim", "user"]
    assert named_speakers("Did Maria and John meet Johnny?", found) == ["Maria", "John"]
    assert parts("Did Maria and John meet?", found) == ["Did Maria meet?", "Did John meet?"]
    # One person, a role label or a name no result was said by is one question, asked once.
    assert parts("What did John say to the user?", found) == []
    assert parts("What did John and Rosa cook?", found) == []
    assert parts("Did Johnny and Marianne meet?", found) == []  # names are whole words


@pytest.mark.parametrize(
    ("query", "names", "asked"),
    [
        ("What activities does Melanie partake in?", ["Melanie"], "What activities does partake in?"),
        ("When did Caroline and Melanie go camping?", ["Caroline", "Melanie"], "When did go camping?"),
        ("What is Caroline's identity?", ["Caroline"], "What is identity?"),
        # Nothing but stop words would be left: the question is about the person.
        ("Who is Caroline?", ["Caroline"], "Who is Caroline?"),
        ("caroline?", ["Caroline"], "caroline?"),
        ("What did Caroline say?", [], "What did Caroline say?"),
    ],
)
def test_the_vector_is_asked_the_question_without_the_names_of_who_speaks(
    query: str, names: list[str], asked: str
) -> None:
    assert what_is_asked(query, names) == asked


def test_the_searches_take_turns_and_keep_the_scores_in_rank_order() -> None:
    whole = [unit(1, score=0.9), unit(2, score=0.8), unit(3, score=0.7)]
    john = [unit(2, score=0.95), unit(4, score=0.6)]
    maria = [unit(5, score=0.4), unit(1, score=0.3), unit(6, score=0.2)]
    merged = take_turns([whole, john, maria], limit=5)
    assert [r.chunk_id for r in merged] == [1, 2, 5, 4, 3]  # round by round: Maria's best (0.4) is third
    assert [r.score for r in merged] == [0.95, 0.9, 0.7, 0.6, 0.4]  # the scores the five had, in rank order
    assert take_turns([[memory(7)], [unit(7)]], limit=5)[1].chunk_id == 7  # a memory and a unit are two things


@given(st.lists(st.lists(st.tuples(st.integers(1, 20), st.floats(0, 2)), max_size=8), max_size=4), st.integers(1, 10))
def test_taking_turns_returns_each_result_once_in_score_order(lists: list[list[tuple[int, float]]], limit: int) -> None:
    searches = [[unit(i, score=s) for i, s in results] for results in lists]
    merged = take_turns(searches, limit)
    ids = [r.chunk_id for r in merged]
    assert len(ids) == len(set(ids)) == min(limit, len({r.chunk_id for s in searches for r in s}))
    assert [r.score for r in merged] == sorted((r.score for r in merged), reverse=True)
    assert all(results[0].chunk_id in ids for results in searches if results and len(searches) <= limit)
