"""Splitting text into overlapping chunks for embedding.

Rules (defaults from the architecture notes: ~1,600 chars, 320 overlap, < 1,920 chars = one chunk):

- A text shorter than `single_below` is one chunk, even though it may be longer than `size`:
  splitting a 1,700-char memory into two mostly-overlapping halves only dilutes its embedding.
- Otherwise a chunk ends at the last sentence boundary that keeps it within `size` characters.
  Boundaries are ".", "!" or "?" (optionally followed by closing quotes/brackets) plus whitespace,
  or a blank line; the whitespace after a boundary stays with the earlier chunk, so chunks start
  on a word. A boundary is only used if it leaves the chunk at least `min_fill` long (a quarter
  of `size`, and always more than `overlap`); otherwise, or when one sentence is longer than the
  room left, the chunk is cut after the last whitespace, and failing that hard at `size`.
- There is no slack: every chunk of a split text is at most `size` characters, exactly.
- The next chunk starts `overlap` characters or fewer before the previous end: at the earliest
  sentence start in that window (rewinding whole sentences), else at the earliest word start in
  it, else exactly `overlap` back. So consecutive chunks share 1..`overlap` characters (when
  `overlap` > 0) and never more, and chunk starts strictly increase, which bounds the loop.

Offsets are character offsets into the original string: `chunk.text == text[chunk.start:chunk.end]`.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

DEFAULT_SIZE = 1600
DEFAULT_OVERLAP = 320
DEFAULT_SINGLE_BELOW = 1920

# Sentence end + following whitespace, or a blank line (and any whitespace after it). The
# lookbehind lets a match start only at the first mark of a run like "?!..." so a long run of
# dots is scanned once, not once per dot (which would be quadratic).
_BOUNDARY = re.compile(r"(?<![.!?])[.!?]+[\"'”’)\]]*\s+|\n[^\S\n]*\n\s*")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Chunk:
    """One piece of a text; `text == source[start:end]`."""

    index: int
    text: str
    start: int
    end: int


def _last_at_most(positions: list[int], low: int, high: int) -> int | None:
    """The largest position p with low <= p <= high, or None."""
    i = bisect_right(positions, high)
    if i and positions[i - 1] >= low:
        return positions[i - 1]
    return None


def _first_at_least(positions: list[int], low: int, high: int) -> int | None:
    """The smallest position p with low <= p < high, or None."""
    i = bisect_left(positions, low)
    if i < len(positions) and positions[i] < high:
        return positions[i]
    return None


def split_text(
    text: str,
    *,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    single_below: int = DEFAULT_SINGLE_BELOW,
) -> list[Chunk]:
    """Split `text` into ordered, overlapping chunks that together cover all of it (see module doc)."""
    if size < 1:
        raise ValueError("size must be at least 1")
    if not 0 <= overlap < size:
        raise ValueError("overlap must be at least 0 and smaller than size")
    n = len(text)
    if n == 0:
        return []
    if n < single_below or n <= size:
        return [Chunk(0, text, 0, n)]

    # Positions where a chunk may start/end: after a sentence end, and after any whitespace.
    sentence_starts = [m.end() for m in _BOUNDARY.finditer(text) if m.end() < n]
    word_starts = [m.end() for m in _WHITESPACE.finditer(text) if m.end() < n]
    # A chunk shorter than this would make little progress once the overlap is rewound.
    min_fill = min(size, max(size // 4, overlap + 1))

    chunks: list[Chunk] = []
    start = 0
    while True:
        if n - start <= size:
            chunks.append(Chunk(len(chunks), text[start:], start, n))
            return chunks
        low, limit = start + min_fill, start + size
        end = _last_at_most(sentence_starts, low, limit)
        if end is None:  # a sentence longer than the room left: cut between words, else hard at `size`
            end = _last_at_most(word_starts, low, limit)
        if end is None:
            end = limit
        chunks.append(Chunk(len(chunks), text[start:end], start, end))
        # Rewind into the chunk just made; never to or before its start, so starts strictly increase.
        window = max(end - overlap, start + 1)
        if window >= end:  # overlap == 0 (or a 1-char chunk): continue right after
            start = end
            continue
        next_start = _first_at_least(sentence_starts, window, end)
        if next_start is None:
            next_start = _first_at_least(word_starts, window, end)
        start = window if next_start is None else next_start
