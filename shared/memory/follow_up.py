"""A second search that follows the first one's best hit: more like what the question found best.

A question often shares few words with part of its evidence, while its best hit shares many with the rest:
"What area was hit by a flood?" finds "My old area was hit by a nasty flood last week", and "old area" is
what leads on to "I want to work on improving my old area, West County". The follow-up asks the full-text
leg for the question together with the best hit's own words (feedback from the first result, on the lexical
leg only, so it needs no second embedding), with the same filters; it is sent in the same round trip as the
question's other extra searches (service.search_memories).

Its results are merged in by place, not by score (the two searches score on different scales): the first
pass keeps its first FOLLOW_AFTER results and four of every five places after them, the follow-up takes the
fifth. So the best evidence for the question as asked stays first, and what the best hit leads to gets a
place within the budget of a context block instead of after everything loosely similar.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from shared.memory.query_parts import in_rank_order, result_key
from shared.memory.search import SearchResult

FOLLOW_AFTER: Final = 3
FOLLOW_EVERY: Final = 5
# The best hit's words added to the question: enough for a message, not a whole summary's worth of terms
# (every term is one more index lookup in the full-text leg).
FOLLOW_WORDS: Final = 60


def follow_up_query(query: str, results: Sequence[SearchResult]) -> str | None:
    """The question with its best hit's words, or None when there is no hit to follow."""
    if not results or not results[0].value:
        return None
    words = results[0].value.split()[:FOLLOW_WORDS]
    return f"{query} {' '.join(words)}"


def merge(first: Sequence[SearchResult], follow: Sequence[SearchResult], limit: int) -> list[SearchResult]:
    """`first`'s results with `follow`'s taking every FOLLOW_EVERY-th place after the first FOLLOW_AFTER, each
    result once, at most `limit`. Scores are handed out again in rank order (the highest to the first result),
    as query_parts.take_turns does, so an order by score keeps this order."""
    taken: dict[tuple[str, int], SearchResult] = {}
    own = iter(first)
    other = iter(follow)

    def take_next(source: Iterator[SearchResult]) -> bool:
        for result in source:
            if (key := result_key(result)) not in taken:
                taken[key] = result
                return True
        return False

    for _ in range(FOLLOW_AFTER):
        take_next(own)
    more = True
    while more and len(taken) < limit:
        more = False
        for _ in range(FOLLOW_EVERY - 1):
            if len(taken) < limit and take_next(own):
                more = True
        if len(taken) < limit and take_next(other):
            more = True
    merged = list(taken.values())[:limit]
    return in_rank_order(merged, [result.score for result in merged])
