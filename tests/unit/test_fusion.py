"""Properties of search fusion (the per-row scoring that follows the SQL legs)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.memory.search import ENTITY_BONUS, SPEAKER_BONUS, SearchOptions, _fuse

ranks = st.one_of(st.none(), st.integers(min_value=1, max_value=500))
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def row(
    text_rank: int | None = None,
    text_norm: float = 0.0,
    vector_rank: int | None = None,
    similarity: float = 0.0,
    entity_rank: int | None = None,
    specificity: float = 0.0,
    like_rank: int | None = None,
    like_score: float = 0.0,
    speaker_named: bool = False,
) -> dict[str, Any]:
    return {
        "text_rank": text_rank,
        "text_score": text_norm,
        "text_normalized": text_norm,
        "like_rank": like_rank,
        "like_score": like_score,
        "vector_rank": vector_rank,
        "vector_similarity": similarity,
        "vector_chunk_id": 1 if vector_rank else None,
        "fill_similarity": None,
        "fill_chunk_id": None,
        "entity_rank": entity_rank,
        "entity_matches": 1 if entity_rank else None,
        "entity_specificity": specificity,
        "speaker_named": speaker_named,
    }


@given(ranks, ranks, ranks, st.integers(min_value=1, max_value=200))
@settings(max_examples=300)
def test_rrf_is_the_sum_of_reciprocal_ranks(text: int | None, vector: int | None, entity: int | None, k: int) -> None:
    score, legs = _fuse(
        row(text_rank=text, vector_rank=vector, entity_rank=entity, specificity=1.0),
        SearchOptions(mode="rrf", rrf_k=k),
        True,
    )
    expected = sum(1 / (k + r) for r in (text, vector, entity) if r is not None)
    assert abs(score - expected) < 1e-12
    assert set(legs) == {name for name, r in (("text", text), ("vector", vector), ("entity", entity)) if r}


@given(st.integers(min_value=1, max_value=499), st.integers(min_value=1, max_value=500), ranks)
def test_rrf_rewards_a_better_rank_and_an_extra_leg(better: int, worse: int, other: int | None) -> None:
    worse = max(worse, better + 1)
    options = SearchOptions(mode="rrf")
    high, _ = _fuse(row(text_rank=better, vector_rank=other), options, True)
    low, _ = _fuse(row(text_rank=worse, vector_rank=other), options, True)
    assert high > low
    alone, _ = _fuse(row(text_rank=better), options, True)
    both, _ = _fuse(row(text_rank=better, vector_rank=better), options, True)
    assert both > alone


@given(unit, unit, unit, unit, st.floats(min_value=0.0, max_value=1.0))
@settings(max_examples=300)
def test_weighted_is_a_convex_mix_plus_a_bounded_entity_bonus(
    text: float, similarity: float, weight: float, specificity: float, bump: float
) -> None:
    options = SearchOptions(mode="weighted", vector_weight=weight)
    base, _ = _fuse(row(text_rank=1, text_norm=text, vector_rank=1, similarity=similarity), options, True)
    assert abs(base - (weight * similarity + (1 - weight) * text)) < 1e-9
    assert 0.0 <= base <= 1.0 + 1e-9
    higher, _ = _fuse(
        row(text_rank=1, text_norm=text, vector_rank=1, similarity=min(1.0, similarity + bump)), options, True
    )
    assert higher >= base - 1e-12
    with_entity, _ = _fuse(
        row(text_rank=1, text_norm=text, vector_rank=1, similarity=similarity, entity_rank=1, specificity=specificity),
        options,
        True,
    )
    assert base - 1e-12 <= with_entity <= base + ENTITY_BONUS * 2 + 1e-9
    # A message whose speaker the query names gets the speaker bonus on top, and shows it among its legs.
    named, legs = _fuse(
        row(text_rank=1, text_norm=text, vector_rank=1, similarity=similarity, speaker_named=True), options, True
    )
    assert abs(named - (base + SPEAKER_BONUS)) < 1e-9 and legs["speaker"] == {"rank": None, "named": True}
    # RRF fuses ranks only: the speaker has none to add.
    rrf, _ = _fuse(row(text_rank=3, speaker_named=True), SearchOptions(mode="rrf"), True)
    assert rrf == _fuse(row(text_rank=3), SearchOptions(mode="rrf"), True)[0]


@given(unit)
def test_without_vectors_the_lexical_score_carries_the_whole_weight(text: float) -> None:
    score, _ = _fuse(row(text_rank=1, text_norm=text), SearchOptions(mode="weighted"), False)
    assert abs(score - text) < 1e-12
    like, _ = _fuse(row(like_rank=1, like_score=text), SearchOptions(mode="weighted"), False)
    assert abs(like - text) < 1e-12


@given(unit, unit)
def test_a_document_without_a_vector_yet_is_scored_on_the_legs_it_has(text: float, weight: float) -> None:
    options = SearchOptions(mode="weighted", vector_weight=weight)
    fresh, legs = _fuse(row(text_rank=1, text_norm=text), options, True)
    assert "vector" not in legs and abs(fresh - text) < 1e-12
