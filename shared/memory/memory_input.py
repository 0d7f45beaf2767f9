"""What a memory write carries and the rules it passes before any SQL runs.

`MemoryInput` is the record every writer (agent tools, the REST API, extraction, maintenance) hands to
the write path in store.py; `prepare` validates and normalises it (kinds with their default namespace and
decay rate, size limits, text Postgres cannot hold, metadata context), and `check_writer` refuses what the
actor may not write (directives, the agent's personality writes). Apart from store.py because none of it
touches the database: the API schemas and the readers use the kinds and limits without the write path.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.memory.keys import MemoryRejected, normalize_namespace, sanitize
from shared.text import clean_text, text_problem

KINDS = ("fact", "episode", "preference", "style", "directive", "artifact", "reflection", "summary", "document")

# Where a memory goes when the writer names no namespace.
DEFAULT_NAMESPACE = {
    "fact": "tacit/facts",
    "preference": "tacit/preferences",
    "style": "tacit/personality",
    "directive": "tacit/personality",
    "artifact": "tacit/artifacts",
    "episode": "episodes",
    "reflection": "reflections",
    "summary": "summaries",
    "document": "documents",
}

# Daily decay rate by kind (confidence × exp(−rate × days since access)); 0 = never decays.
DEFAULT_DECAY_RATE = {
    "fact": 0.01,
    "preference": 0.005,
    "style": 0.01,
    "directive": 0.0,
    "artifact": 0.005,
    "episode": 0.02,
    "reflection": 0.0,
    "summary": 0.01,
    "document": 0.0,
}

MAX_TAGS = 20
MAX_TAG_CHARS = 64
MAX_NAMESPACE_CHARS = 128

# `metadata.context`: text from around the memory's source (for an episode, the neighbouring turns of
# the conversation). A turn such as "Yes, twice last summer!" means nothing on its own; its context
# makes it findable. The context is embedded with the memory and searchable at the lowest full-text
# weight (migration 0005), but it is not part of the value: reads, dedup and search results show the
# value alone.
CONTEXT_KEY = "context"
MAX_CONTEXT_CHARS = 2048

# Daily decay rates above this make a memory worthless within hours; it also keeps the value inside
# what the `real` column holds.
MAX_DECAY_RATE = 10.0
# `real` (float4) keeps about 7 significant digits and cannot hold magnitudes below ~1e-38 at all
# (1e-127 raised "value out of range: underflow", a 500): scores are kept to 6 decimal places.
REAL_DECIMALS = 6


@dataclass
class MemoryInput:
    key: str
    value: str
    namespace: str | None = None
    kind: str = "fact"
    tags: Sequence[str] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    confidence: float = 1.0
    decay_rate: float | None = None
    event_time: datetime | None = None
    source_session_id: int | None = None
    source_message_ids: Sequence[int] = ()
    # When it became true: for a fact learned from a conversation, when its messages were said. None = now.
    valid_from: datetime | None = None


def storable_real(name: str, value: float, maximum: float) -> float:
    """`value` checked against 0..maximum and rounded to what a `real` column keeps (1e-127 → 0.0)."""
    if not math.isfinite(value) or not 0 <= value <= maximum:
        raise MemoryRejected(f"{name} must be between 0 and {maximum:g}")
    return round(float(value), REAL_DECIMALS)


def clean_tags(tags: Sequence[str]) -> list[str]:
    cleaned = []
    for tag in tags:
        tag = " ".join(clean_text(str(tag)).split()).casefold()
        if not tag:
            continue
        if len(tag) > MAX_TAG_CHARS:
            raise MemoryRejected(f"tag {tag[:20]!r}… is {len(tag)} characters; the limit is {MAX_TAG_CHARS}")
        if tag not in cleaned:
            cleaned.append(tag)
    if len(cleaned) > MAX_TAGS:
        raise MemoryRejected(f"{len(cleaned)} tags; the limit is {MAX_TAGS}")
    return cleaned


def _clean_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    cleaned = dict(metadata)
    context = cleaned.pop(CONTEXT_KEY, None)
    if context is None:
        return cleaned
    if not isinstance(context, str):
        raise MemoryRejected(f"metadata.{CONTEXT_KEY} must be a string")
    # Layout carries nothing for search or embedding, and control characters (NUL above all) cannot be
    # stored in jsonb: whitespace runs become one space, other control characters go.
    context = "".join(ch for ch in " ".join(context.split()) if unicodedata.category(ch) != "Cc")
    if len(context) > MAX_CONTEXT_CHARS:
        raise MemoryRejected(
            f"metadata.{CONTEXT_KEY} is {len(context)} characters after cleaning; the limit is {MAX_CONTEXT_CHARS}"
        )
    if context:
        cleaned[CONTEXT_KEY] = context
    return cleaned


def _check_storable(item: MemoryInput) -> None:
    """Text Postgres cannot hold is refused here, for every writer (API, agent tools, extraction): lone
    surrogates anywhere; NUL in namespace and tags (key and value lose control characters when cleaned)."""
    context = item.metadata.get(CONTEXT_KEY)
    fields: list[tuple[str, str, bool]] = [
        ("key", item.key, False),
        ("value", item.value, False),
        ("namespace", item.namespace or "", True),
        *(("tag", str(tag), True) for tag in item.tags),
        *([(f"metadata.{CONTEXT_KEY}", context, False)] if isinstance(context, str) else []),
    ]
    for name, text, nul_matters in fields:
        problem = text_problem(text)
        if problem is not None and (nul_matters or "surrogate" in problem):
            raise MemoryRejected(f"{name} {problem}")


def prepare(item: MemoryInput) -> MemoryInput:
    """Validate and normalise an input; raises MemoryRejected with the reason."""
    if item.kind not in KINDS:
        raise MemoryRejected(f"unknown kind {item.kind!r}; use one of {', '.join(KINDS)}")
    _check_storable(item)
    key, value = sanitize(item.key, item.value)
    namespace = normalize_namespace(clean_text(item.namespace or DEFAULT_NAMESPACE[item.kind]))
    if not namespace:
        raise MemoryRejected("namespace is empty after normalisation")
    if len(namespace) > MAX_NAMESPACE_CHARS:
        raise MemoryRejected(f"namespace is {len(namespace)} characters; the limit is {MAX_NAMESPACE_CHARS}")
    confidence = storable_real("confidence", item.confidence, 1.0)
    decay_rate = None if item.decay_rate is None else storable_real("decay_rate", item.decay_rate, MAX_DECAY_RATE)
    return MemoryInput(
        key=key,
        value=value,
        namespace=namespace,
        kind=item.kind,
        tags=clean_tags(item.tags),
        metadata=_clean_metadata(item.metadata),
        confidence=confidence,
        decay_rate=DEFAULT_DECAY_RATE[item.kind] if decay_rate is None else decay_rate,
        event_time=item.event_time,
        source_session_id=item.source_session_id,
        source_message_ids=list(item.source_message_ids),
        valid_from=item.valid_from,
    )


def is_style(item: MemoryInput) -> bool:
    return item.kind == "style" or (item.namespace or "").startswith("tacit/personality/style")


# The learned directive is shown to the model as instructions ("Personality (Learned)"), and style
# observations are what it is synthesised from. Only personality synthesis writes the directive, and
# the agent (a model that a tool result or a web page may have talked into it) cannot write either:
# what it stores is shown as data, fenced (see shared/context/data_fence.py).
DIRECTIVE_NAMESPACE, DIRECTIVE_KEY = "tacit/personality", "directive"
PERSONALITY_NAMESPACE = "tacit/personality"
DIRECTIVE_WRITERS = frozenset({"synthesis"})
PERSONALITY_REFUSED_WRITERS = frozenset({"agent"})


def _is_personality(namespace: str) -> bool:
    return namespace == PERSONALITY_NAMESPACE or namespace.startswith(PERSONALITY_NAMESPACE + "/")


def check_writer(item: MemoryInput, actor: str) -> None:
    """Refuse (MemoryRejected) a prepared memory that this actor may not write: directives and the
    directive slot are synthesis-only, and the agent writes nothing under tacit/personality."""
    namespace = item.namespace or ""
    if (item.kind == "directive" or (namespace, item.key) == (DIRECTIVE_NAMESPACE, DIRECTIVE_KEY)) and (
        actor not in DIRECTIVE_WRITERS
    ):
        raise MemoryRejected(
            "directives are synthesised from style observations and cannot be written directly; "
            "store a preference or a style observation instead"
        )
    if actor in PERSONALITY_REFUSED_WRITERS and (item.kind == "style" or _is_personality(namespace)):
        raise MemoryRejected(
            "style observations are learned from the user's own messages and cannot be stored by the agent; "
            "store it as a preference instead"
        )
