"""Views of a text with its obfuscation undone, for the prompt-injection scan (shared/memory/injection.py).

Obfuscation is undone before scanning. Each text is scanned in several *views*, and a pattern
matches if it matches any of them:

- the base view: NFKC (full-width letters become ASCII), Unicode "tag" characters decoded to the
  ASCII they mirror, format characters (zero-width, soft hyphen, bidi controls) removed, combining
  marks removed ("ïgnörë"), HTML entities and %-escapes decoded, underscores read as spaces;
- homoglyphs: Cyrillic and Greek letters that look Latin folded to Latin ("іgnоrе");
- joined: letters spelled out one by one ("i g n o r e", "I.G.N.O.R.E") and words split by hyphens
  ("IG-NORE") joined back;
- leetspeak: digits and symbols inside words read as letters ("1gn0r3", "4ll"), with 1 read as i
  and, in a second view, as l;
- decoded: base64 and hex runs that decode to readable text, scanned like the text itself;
- ROT13 and reversed text;
- squashed: letters only, for a few long phrases that cannot occur by accident
  ("ignoreallpreviousinstructions").
"""

from __future__ import annotations

import base64
import binascii
import codecs
import html
import re
import unicodedata
import urllib.parse
from collections.abc import Iterator

# ============================================================================ views of the text

# Unicode tag characters U+E0020–U+E007E mirror printable ASCII and are invisible: decoded.
_TAGS = {cp: chr(cp - 0xE0000) for cp in range(0xE0020, 0xE007F)}
# Look-alike letters from Cyrillic and Greek, folded to the Latin letter they imitate. Only used in
# a view of its own, so real Russian or Greek text is still scanned as itself in the base view.
_HOMOGLYPHS = str.maketrans(
    {
        "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
        "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
        "ɡ": "g", "һ": "h", "ԛ": "q", "ԝ": "w", "ո": "n", "А": "A", "В": "B", "Е": "E", "К": "K",
        "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T", "Х": "X", "І": "I", "Ј": "J",
        "Ѕ": "S", "α": "a", "ο": "o", "ρ": "p", "ν": "v", "ι": "i", "κ": "k", "τ": "t", "υ": "u",
        "ε": "e", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
        "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    }
)  # fmt: skip
_LEET_I = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g", "@": "a", "$": "s"}
)
_LEET_L = str.maketrans(
    {"0": "o", "1": "l", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "9": "g", "@": "a", "$": "s"}
)
_LEET_WORD = re.compile(r"[A-Za-z0-9@$]*[A-Za-z][A-Za-z0-9@$]*")
_HAS_LEET = re.compile(r"[0-9@$]")
# A letter spelled out: single letters separated by one separator, at least three in a row.
_SPELLED = re.compile(r"(?<![^\W_])[^\W\d_](?:[ .*·|/\-][^\W\d_]){2,}(?![^\W_])")
_SPELLED_SEPARATOR = re.compile(r"[ .*·|/\-]")
_INNER_HYPHEN = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_RUN = re.compile(r"\b(?:[0-9A-Fa-f]{2}){8,}\b")
_HORIZONTAL_SPACE = re.compile(r"[ \t\f\v]+")
_MAX_DECODED = 8


def _base(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_TAGS)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    # Combining marks go ("ïgnörë" is "ignore"); NFC afterwards keeps scripts such as Hangul whole.
    decomposed = unicodedata.normalize("NFKD", text)
    text = unicodedata.normalize("NFC", "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn"))
    if "&" in text:
        text = html.unescape(text)
    if _PERCENT.search(text):
        text = urllib.parse.unquote(text)
    return _HORIZONTAL_SPACE.sub(" ", text)


def _joined(text: str) -> str:
    text = _SPELLED.sub(lambda m: _SPELLED_SEPARATOR.sub("", m.group(0)), text)
    return _INNER_HYPHEN.sub("", text)


def _unleet(text: str, table: dict[int, str]) -> str:
    return _LEET_WORD.sub(lambda m: m.group(0).translate(table) if _HAS_LEET.search(m.group(0)) else m.group(0), text)


def _readable(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(1 for ch in text if ch.isprintable() or ch in "\n\t")
    letters = sum(1 for ch in text if ch.isalpha())
    return text if text and printable / len(text) > 0.95 and letters / len(text) > 0.5 else None


def _decoded(text: str) -> Iterator[str]:
    """Readable text hidden in base64 or hex runs of `text`."""
    found = 0
    for match in _BASE64_RUN.finditer(text):
        run = match.group(0).replace("-", "+").replace("_", "/")
        try:
            data = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        if (decoded := _readable(data)) is not None:
            found += 1
            yield decoded
        if found >= _MAX_DECODED:
            return
    for match in _HEX_RUN.finditer(text):
        if (decoded := _readable(bytes.fromhex(match.group(0)))) is not None:
            found += 1
            yield decoded
        if found >= _MAX_DECODED:
            return


def views(text: str, depth: int = 0) -> Iterator[tuple[str, bool]]:
    """(view, derived) pairs: the base view first, then views that undo some obfuscation."""
    base = _base(text)
    yield base, False
    # Underscores read as spaces here ("ignore_all_previous"), not in the base view, where they are
    # part of names such as "<|im_start|>".
    homoglyphs = base.translate(_HOMOGLYPHS).replace("_", " ")
    joined = _joined(homoglyphs)
    seen = {base}
    candidates = [
        homoglyphs,
        joined,
        _unleet(joined, _LEET_I),
        _unleet(joined, _LEET_L),
        codecs.encode(homoglyphs, "rot13"),
        homoglyphs[::-1],
    ]
    for view in candidates:
        if view not in seen:
            seen.add(view)
            yield view, True
    if depth < 2:
        for decoded in _decoded(base):
            for view, _ in views(decoded, depth + 1):
                yield view, True


def squashed(text: str) -> str:
    return "".join(ch for ch in _unleet(_joined(_base(text).translate(_HOMOGLYPHS)), _LEET_L) if ch.isalpha()).lower()
