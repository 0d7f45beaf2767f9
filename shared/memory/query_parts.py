"""A question about several people, asked once per person.

"What volunteering have John and Maria both done?" needs what John said and what Maria said. Searched as a
whole, the query names both speakers, so the bonus a unit gets for being said by a person the query names
(search.SPEAKER_BONUS) goes to every line of the conversation alike, and whichever person's lines the
words and vectors happen to favour fill the results. Asked once per person ("What volunteering have John
both done?"), each part ranks that person's own lines first; the whole query and its parts then take turns
(`take_turns`), so each person's best lines are among the first results.

The names also stay out of the question's vector (`what_is_asked`). In a conversation between two people
every line is said by one of them and often addressed to the other by name, so "What activities does Melanie
partake in?" embedded as it is comes closest to lines that say "Melanie", which Caroline says; the speaker bonus
already favours Melanie's own lines, and the vector is left to match what they are about. Every part of a
question then has the same vector: the names are all that tells the parts apart.

Who counts as a person is who speaks in the user's conversations (search_reads.py), read before the first
search. Role labels (a message without a name is said by "user" or "assistant") are not people.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final

from shared.memory.entity_extraction import query_entity_names
from shared.memory.search import SearchResult

ROLE_LABELS: Final = frozenset({"user", "assistant", "system", "tool"})
_JOINER = r"(?:,|&|\band\b|\bor\b)"


@lru_cache(maxsize=256)
def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(name)}(?:'s|’s)?(?!\w)", re.IGNORECASE)


@lru_cache(maxsize=256)
def _name_with_joiner(name: str) -> re.Pattern[str]:
    """The name with the word joining it to the next name or the one before ("John and" / "and John")."""
    name_re = _name_pattern(name).pattern
    return re.compile(rf"{name_re}\s*{_JOINER}|{_JOINER}\s*{name_re}|{name_re}", re.IGNORECASE)


def named_speakers(query: str, speakers: Iterable[str]) -> list[str]:
    """Of these speakers, the people the query names, in the order it names them."""
    people = {name.strip() for name in speakers if name and name.strip().lower() not in ROLE_LABELS}
    found = [(match.start(), name) for name in people if (match := _name_pattern(name).search(query))]
    return [name for _, name in sorted(found)]


def without_names(query: str, names: Sequence[str]) -> str:
    """The query with these names (and their possessives) taken out."""
    for name in names:
        query = _name_with_joiner(name).sub(" ", query, count=1)
        query = _name_pattern(name).sub(" ", query)
    return re.sub(r"\s+([?.!,;:])", r"\1", " ".join(query.split()))


def what_is_asked(query: str, names: Sequence[str]) -> str:
    """The query without these names, for its vector; the query as it is when nothing but stop words would be
    left ("Who is Caroline?" is about her, not about something she said)."""
    if not names:
        return query
    rest = without_names(query, names)
    return rest if query_entity_names(rest) else query


def parts(query: str, speakers: Iterable[str]) -> list[str]:
    """One query per person named, each without the others; [] when the query names fewer than two.
    `speakers`: who speaks in the user's conversations (search_reads.SearchReads)."""
    names = named_speakers(query, speakers)
    if len(names) < 2:
        return []
    return [without_names(query, [other for other in names if other != name]) for name in names]


def take_turns(lists: Sequence[Sequence[SearchResult]], limit: int) -> list[SearchResult]:
    """The lists' results in rounds (each list's best, then each one's second best, ...), each result once:
    every part's best evidence is among the first results, whichever part the scores would favour. The
    scores, which rank a result within its own search, are handed out again in rank order (the highest to the
    first result), so an order by score, as the context block packs, keeps the rounds' order."""
    taken: dict[tuple[str, int], SearchResult] = {}
    for rank in range(max((len(results) for results in lists), default=0)):
        for results in lists:
            if rank < len(results) and (key := result_key(results[rank])) not in taken:
                taken[key] = results[rank]
    merged = list(taken.values())[:limit]
    return in_rank_order(merged, [result.score for result in merged])


def in_rank_order(merged: Sequence[SearchResult], scores: Sequence[float]) -> list[SearchResult]:
    """`merged` in its order with `scores` handed out again from the highest down, so an order by score (as the
    context block packs) keeps this order; results past the end of `scores` get the lowest of them."""
    ordered = sorted(scores, reverse=True)
    ordered += [ordered[-1] if ordered else 0.0] * (len(merged) - len(ordered))
    # A result keeps its object when its score stays (most do): a copy per result was most of this call's time.
    return [
        result if result.score == score else dataclasses.replace(result, score=score)
        for result, score in zip(merged, ordered, strict=False)
    ]


def result_key(result: SearchResult) -> tuple[str, int]:
    """One document however many searches return it: a memory by its id, a transcript unit by its chunk."""
    return ("memory", result.id) if result.id is not None else ("unit", result.chunk_id or 0)
