"""Reading a model's extraction answer: the facts it names per category (`ExtractedFacts`) and the
tolerant parser that finds them in whatever the model wrote (`parse_extraction`), with `derive_key` for
items that come without a key.

Apart from extraction.py (the transcript the model sees, its prompt, and where each fact is stored)
because reading an answer is its own problem: untrusted text of any shape, bounded work, never an
exception. Pure functions, like the rest of extraction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shared.memory.keys import normalize_key

CATEGORIES = ("preferences", "entities", "decisions", "styles", "artifacts")

# Bounds on what a model answer can make us do: parsing is at worst quadratic in the text length
# (one decode attempt per "{"), and a runaway answer should not become hundreds of memories.
MAX_PARSE_CHARS = 200_000
MAX_DECODE_ATTEMPTS = 200
MAX_ITEMS_PER_CATEGORY = 50
MAX_DERIVED_KEY_WORDS = 6


@dataclass
class ExtractedFacts:
    """Facts per category, each a list of (key, value) pairs in the order they were found."""

    preferences: list[tuple[str, str]] = field(default_factory=list)
    entities: list[tuple[str, str]] = field(default_factory=list)
    decisions: list[tuple[str, str]] = field(default_factory=list)
    styles: list[tuple[str, str]] = field(default_factory=list)
    artifacts: list[tuple[str, str]] = field(default_factory=list)

    def category(self, name: str) -> list[tuple[str, str]]:
        if name not in CATEGORIES:
            raise KeyError(name)
        items: list[tuple[str, str]] = getattr(self, name)
        return items

    def items(self) -> Iterator[tuple[str, str, str]]:
        """(category, key, value) for every fact, category by category."""
        for name in CATEGORIES:
            for key, value in self.category(name):
                yield name, key, value

    @property
    def total(self) -> int:
        return sum(len(self.category(name)) for name in CATEGORIES)

    def is_empty(self) -> bool:
        return self.total == 0


_CATEGORY_ALIASES = {alias: name for name in CATEGORIES for alias in (name, name.rstrip("s"))}
_CATEGORY_ALIASES["entity"] = "entities"
_KEY_FIELDS = ("key", "name", "title", "topic", "label")
_VALUE_FIELDS = ("value", "fact", "description", "detail", "details", "text", "content", "observation", "summary")
_FENCED_BLOCK = re.compile(r"```[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_KEY_VALUE_STRING = re.compile(r"^([^:\n]{1,64}?)\s*:\s+(.+)$", re.DOTALL)


def parse_extraction(text: str) -> ExtractedFacts:
    """Read a model's answer into ExtractedFacts; never raises (unreadable input gives no facts).

    Tolerated: code fences, prose around the JSON, the category object nested under another key,
    trailing commas, singular or differently-cased category names, non-string values (rendered
    as readable text), items given as "key: value" strings or plain strings (a key is derived),
    a category given as a {key: value} mapping. Missing categories are empty; unknown ones are
    ignored. Keys are deduplicated per category (first wins) and capped per category.
    """
    try:
        categories = _find_category_object(text[:MAX_PARSE_CHARS] if isinstance(text, str) else "")
        facts = ExtractedFacts()
        if categories is None:
            return facts
        for name, raw in categories.items():
            seen: set[str] = set()
            target = facts.category(name)
            for key, value in _items(raw):
                normalized = normalize_key(key)
                if not normalized or normalized in seen or len(target) >= MAX_ITEMS_PER_CATEGORY:
                    continue
                seen.add(normalized)
                target.append((key, value))
        return facts
    except Exception:
        # Model output is untrusted input: whatever slipped past the checks above means "no facts",
        # never a failed extraction task that is retried forever.
        return ExtractedFacts()


def summary_in_answer(text: str) -> str | None:
    """The "summary" string of an answer that carries memories and a summary in one JSON object (a
    compaction's combined call), or None when it has none; never raises."""
    try:
        source = text[:MAX_PARSE_CHARS] if isinstance(text, str) else ""
        sources = [m.group(1) for m in _FENCED_BLOCK.finditer(source)] + [source]
        for candidate in sources:
            for variant in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
                for decoded in _decode_objects(variant):
                    if not isinstance(decoded, dict):
                        continue
                    for key, value in decoded.items():
                        if str(key).strip().lower() == "summary" and isinstance(value, str) and value.strip():
                            return value
    except Exception:  # untrusted text: no summary, and the caller asks for one on its own
        return None
    return None


def _find_category_object(text: str) -> dict[str, Any] | None:
    sources = [m.group(1) for m in _FENCED_BLOCK.finditer(text)] + [text]
    for source in sources:
        for variant in (source, _TRAILING_COMMA.sub(r"\1", source)):
            for decoded in _decode_objects(variant):
                found = _categories_in(decoded, depth=0)
                if found is not None:
                    return found
    return None


def _decode_objects(source: str) -> Iterator[Any]:
    """Every JSON object that starts at some "{" of `source`, left to right."""
    decoder = json.JSONDecoder()
    index = source.find("{")
    attempts = 0
    while index != -1 and attempts < MAX_DECODE_ATTEMPTS:
        attempts += 1
        try:
            value, end = decoder.raw_decode(source, index)
        except (ValueError, RecursionError):
            index = source.find("{", index + 1)
            continue
        yield value
        index = source.find("{", end)


def _categories_in(value: Any, depth: int) -> dict[str, Any] | None:
    """The category lists of the first object (breadth-first within one level) that has any."""
    if depth > 4:
        return None
    if isinstance(value, dict):
        found = {}
        for raw_key, raw in value.items():
            name = _CATEGORY_ALIASES.get(str(raw_key).strip().lower().replace(" ", "_"))
            if name is not None and name not in found:
                found[name] = raw
        if found:
            return found
        children: Iterable[Any] = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return None
    for child in children:
        if isinstance(child, dict | list):
            nested = _categories_in(child, depth + 1)
            if nested is not None:
                return nested
    return None


def _items(raw: Any) -> Iterator[tuple[str, str]]:
    if isinstance(raw, list):
        for element in raw:
            item = _item(element)
            if item is not None:
                yield item
    elif isinstance(raw, dict):
        item = _item(raw) if _field(raw, _KEY_FIELDS + _VALUE_FIELDS) is not None else None
        if item is not None:
            yield item
        else:
            # {"editor": "vim", "shell": "zsh"}: a mapping of key to value.
            for key, value in raw.items():
                text = readable(value)
                if str(key).strip() and text:
                    yield str(key).strip(), text
    elif isinstance(raw, str):
        item = _item(raw)
        if item is not None:
            yield item


def _item(element: Any) -> tuple[str, str] | None:
    if isinstance(element, str):
        text = element.strip()
        if not text:
            return None
        match = _KEY_VALUE_STRING.match(text)
        if match and len(match.group(1).split()) <= 5 and not re.search(r"[.!?]", match.group(1)):
            return match.group(1).strip(), match.group(2).strip()
        key = derive_key(text)
        return (key, text) if key else None
    if isinstance(element, dict):
        key_field = _field(element, _KEY_FIELDS)
        value_field = _field(element, _VALUE_FIELDS)
        if key_field is None and value_field is None:
            if len(element) == 1:  # {"editor": "vim"}
                ((key, value),) = element.items()
                text = readable(value)
                return (str(key).strip(), text) if str(key).strip() and text else None
            return None
        value = readable(element[value_field]) if value_field is not None else ""
        if not value:
            return None
        key = readable(element[key_field]) if key_field is not None else ""
        key = key or derive_key(value)
        return (key, value) if key else None
    # A bare number, bool or nested list is not a fact we can name.
    return None


def _field(element: dict[str, Any], names: tuple[str, ...]) -> str | None:
    lowered = {str(k).strip().lower(): k for k in element}
    for name in names:
        if name in lowered:
            return str(lowered[name])
    return None


def readable(value: Any, depth: int = 0) -> str:
    """A model's JSON value as plain text: strings stripped, booleans yes/no, lists and objects joined."""
    if value is None or depth > 4:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list):
        return ", ".join(text for text in (readable(v, depth + 1) for v in value) if text)
    if isinstance(value, dict):
        parts = (f"{str(k).strip()}: {readable(v, depth + 1)}" for k, v in value.items())
        return "; ".join(part for part in parts if not part.endswith(": "))
    return str(value).strip()


def derive_key(value: str, max_words: int = MAX_DERIVED_KEY_WORDS) -> str:
    """A short hyphenated key from the first words of a value ("" when it has no words)."""
    words = re.findall(r"[^\W_]+", value.lower().replace("'", "").replace("’", ""))
    return "-".join(words[:max_words])[:64].strip("-")
