"""Memory keys, namespaces and values: normalisation, sanitisation and a dedup fingerprint.

Everything here is pure string work so the rules can be unit-tested without a database and so
every writer (extraction, flush, consolidation, the agent's tool, the HTTP API) applies the same
ones. Writers call `sanitize` before storing anything; a refusal raises `MemoryRejected`, whose
message is meant to be shown to whoever sent the memory (it becomes an HTTP 422 detail).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Re-exported: writers and the pipeline import the detector from here.
from shared.memory.injection import injection_category as injection_category
from shared.text import clean_text

MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 2048


class MemoryRejected(ValueError):
    """A memory that must not be stored; `reason` (also the exception message) says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------- key normalisation

_SEPARATORS = re.compile(r"[\s_]+")  # every whitespace kind counts as a space, not just " "
_HYPHENS = re.compile(r"-{2,}")
_SLASHES = re.compile(r"/{2,}")


def normalize_key(key: str) -> str:
    """Canonical form of a memory key, so "Code_Style" and "code style" name the same memory.

    Lowercase; underscores and whitespace become hyphens; runs of hyphens or slashes collapse to
    one; hyphens are trimmed at both ends of every `/`-separated segment and empty segments are
    dropped, so "Preference/ Code_Style " becomes "preference/code-style". The result is a fixed
    point: normalising it again changes nothing.
    """
    text = _SEPARATORS.sub("-", key.lower())
    text = _SLASHES.sub("/", _HYPHENS.sub("-", text))
    segments = (segment.strip("-") for segment in text.split("/"))
    return "/".join(segment for segment in segments if segment)


def normalize_namespace(namespace: str) -> str:
    """Namespaces ("tacit/preferences", "daily/2026-11-21") follow exactly the key rules."""
    return normalize_key(namespace)


# --------------------------------------------------------------------------- control characters


def _strip_controls(text: str, keep: str) -> str:
    """The text in its one form (`clean_text`: invisible characters removed, NFC), without Unicode control
    characters (category Cc: C0, DEL, C1) except those in `keep`."""
    text = clean_text(text)
    return "".join(ch for ch in text if ch in keep or unicodedata.category(ch) != "Cc")


def _clean_key(key: str) -> str:
    # Whitespace controls separate words ("a\tb" means "a b", not "ab"), so they become spaces
    # before the remaining control characters are dropped.
    key = _strip_controls(re.sub(r"\s+", " ", key), keep="")
    return " ".join(key.split())


def _clean_value(value: str) -> str:
    # A lone CR is a line break too; CRLF becomes LF. Newlines and tabs carry layout, keep them.
    value = value.replace("\r\n", "\n").replace("\r", "\n")
    return _strip_controls(value, keep="\n\t").strip()


# --------------------------------------------------------------------------- sanitisation


def sanitize(key: str, value: str) -> tuple[str, str]:
    """Clean and validate a memory; returns (normalised key, cleaned value) or raises MemoryRejected.

    Control characters are stripped (values keep newlines and tabs), key whitespace collapsed and
    the key normalised. Limits apply to the cleaned text, and too-long input is refused with its
    length rather than silently truncated: a cut-off fact can say something different from the
    original, and the sender can shorten it better than we can.
    """
    clean_key = _clean_key(key)
    clean_value = _clean_value(value)
    normalized = normalize_key(clean_key)
    if not normalized:
        raise MemoryRejected("key is empty after removing control characters and separators")
    if not clean_value:
        raise MemoryRejected("value is empty after removing control characters and whitespace")
    if len(normalized) > MAX_KEY_CHARS:
        raise MemoryRejected(f"key is {len(normalized)} characters after cleaning; the limit is {MAX_KEY_CHARS}")
    if len(clean_value) > MAX_VALUE_CHARS:
        raise MemoryRejected(f"value is {len(clean_value)} characters after cleaning; the limit is {MAX_VALUE_CHARS}")
    # Keys are scanned as given and with their separators read as spaces: "ignore_previous_instructions".
    # And as sent: cleaning drops hidden text (tag characters, zero-width), and hidden text that is an
    # instruction makes the whole memory an attack, refused rather than stored without its payload.
    scans = (
        ("key", re.sub(r"[-_/]+", " ", clean_key)),
        ("key", clean_key),
        ("value", clean_value),
        *((("key", key),) if key != clean_key else ()),
        *((("value", value),) if value != clean_value else ()),
    )
    for field, text in scans:
        category = injection_category(text)
        if category is not None:
            raise MemoryRejected(f'{field} looks like a prompt injection ("{category}")')
    return normalized, clean_value


# --------------------------------------------------------------------------- dedup fingerprint

_TRAILING_PUNCTUATION = ".,;:!?…。！？"


def content_fingerprint(value: str) -> str:
    """A comparison form for "the same content is already stored under another key".

    Two values with the same fingerprint say the same thing for dedup purposes. Deliberately
    conservative so distinct facts never merge: NFKC + casefold ("Tabs" = "tabs", full-width =
    ASCII), whitespace collapsed (line wrapping is not content), and only *trailing* sentence
    punctuation dropped ("Prefers tabs." = "prefers tabs"). Inner punctuation stays, because
    "v3.5" and "v35", or "no, thanks" and "no thanks!" can differ in meaning.
    """
    text = " ".join(unicodedata.normalize("NFKC", value).casefold().split())
    return text.rstrip(_TRAILING_PUNCTUATION + " ")


def content_key(value: str) -> bytes:
    """What `memories.content_key` stores: sha256 of the fingerprint, so "same content" is an index probe.

    The one definition of the stored key; SQL never recomputes it (it cannot reproduce the NFKC and
    casefold rules exactly), so every writer passes it in and rows written before it existed get it
    from `shared.memory.content_keys.backfill_batch` (nightly decay).
    """
    return hashlib.sha256(content_fingerprint(value).encode()).digest()
