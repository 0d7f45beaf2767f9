"""Small text helpers shared across the domain."""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (~4 characters per token for English prose)."""
    return (len(text) + 3) // 4 if text else 0


_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> frozenset[str]:
    """The case-folded words (runs of letters and digits) of `text`."""
    return frozenset(_WORD.findall(text.casefold()))


def escape_like(text: str) -> str:
    """`text` as a literal inside a LIKE/ILIKE pattern (backslash is Postgres's default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# Postgres `text` holds neither NUL nor lone UTF-16 surrogates (JSON's "\ud800" decodes to one in
# Python, and encoding it to UTF-8 for the wire fails): either would surface as a 500 from deep in a
# write. Every text field that reaches Postgres is checked here first, so the caller gets a 422.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as Postgres text, or None when it can."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return f"contains a NUL character (U+0000) at position {found.start()}"
    return f"is not valid Unicode: a lone surrogate (U+{ord(char):04X}) at position {found.start()}"


# Characters that change nothing a reader sees but can change what a model or a comparison sees: format
# controls that hide or reorder text (zero-width space, LRM/RLM, word joiner, BOM, bidi overrides and
# isolates) and the tag block U+E0000-E007F, which renders as nothing and has carried invisible instructions
# into prompts. ZWNJ/ZWJ (U+200C/U+200D) stay: some scripts and emoji sequences need them.
INVISIBLE = dict.fromkeys(
    [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200B, 0x200E, 0x200F, 0x2060, 0xFEFF, *range(0xE0000, 0xE0080)],
    None,
)


def clean_text(value: str) -> str:
    """The one form of text that looks the same: invisible characters removed, then NFC, so "café" typed
    precomposed or as "e" + combining accent is one string. Every door applies it (request validation,
    and the writers of turns, messages and memories for the doors that are not HTTP). Idempotent."""
    if value.isascii():
        return value
    return unicodedata.normalize("NFC", value.translate(INVISIBLE))


def valid_text(value: str) -> str:
    """Pydantic validator: `value` cleaned (`clean_text`), or a ValueError naming the first unstorable
    character."""
    return clean_text(storable_text(value))


# The one check for request strings that end up in Postgres (bodies, query and path parameters):
# `SafeText`, or `Annotated[str, Field(max_length=...), SAFE_TEXT]` with length limits — the limits go
# before the check, so pydantic applies them as string limits ("at most N characters"). Validators that
# run after it (a blank check) see the cleaned text.
SAFE_TEXT = AfterValidator(valid_text)
SafeText = Annotated[str, SAFE_TEXT]


def storable_text(value: str) -> str:
    """Pydantic validator: `value` as sent, or a ValueError naming the first unstorable character."""
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(f"text {problem}")
    return value


# For fields whose writer cleans them itself and must see them as sent: a memory's key and value are
# scanned for instructions hidden in invisible characters before cleaning drops them (shared.memory.keys).
STORABLE_TEXT = AfterValidator(storable_text)


def printable(value: str) -> str:
    """`value` with lone surrogates replaced by U+FFFD, so it can be encoded (e.g. echoed in JSON)."""
    return _SURROGATE.sub("\ufffd", value)


_SURROGATE = re.compile("[\ud800-\udfff]")
