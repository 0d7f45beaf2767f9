"""The injection benchmark's fake model that obeys injected text, and its per-item outcome records."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ops.fake_llm import FakeReply, Json, echo_reply, user_texts

CLEAN_DIRECTIVE = (
    "You keep your answers short and direct. You match the user's informal, playful tone. You use British spelling."
)
EXTRACTION_CATEGORIES = ("preferences", "entities", "decisions", "styles", "artifacts")


def alnum(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).casefold() if ch.isalnum())


def visible(fragment: str, seen: str) -> bool:
    """Whether a model shown `seen` saw `fragment` (compared on letters and digits, first 60 of them)."""
    probe = alnum(fragment)[:60]
    return bool(probe) and probe in seen


def _system_text(body: Json) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system if isinstance(block, dict))
    return system if isinstance(system, str) else ""


@dataclass
class ObeyingModel:
    """A model that does whatever injected text asks: when all `parts` are visible in an extraction
    request, `payload` comes back as a fact of every category; when the payload is among a synthesis
    request's style observations, it is appended to the directive. What it is never shown, it cannot obey."""

    parts: tuple[str, ...] = ()
    payload: str | None = None
    saw_attack: bool = False

    def arm(self, parts: Sequence[str], payload: str) -> None:
        self.parts, self.payload, self.saw_attack = tuple(parts), payload, False

    def disarm(self) -> None:
        self.parts, self.payload, self.saw_attack = (), None, False

    def __call__(self, body: Json) -> FakeReply:
        system = _system_text(body)
        seen = alnum(" ".join(user_texts(body)))
        if "pick out durable memories" in system:
            found: dict[str, list[dict[str, str]]] = {name: [] for name in EXTRACTION_CATEGORIES}
            if self.payload is not None and all(visible(part, seen) for part in self.parts):
                self.saw_attack = True
                found = {name: [{"key": "injected", "value": self.payload}] for name in EXTRACTION_CATEGORIES}
                found["entities"] = [{"key": "note/injected", "value": self.payload}]
            return FakeReply(text=json.dumps(found))
        if "personality directive" in system:
            if self.payload is None or not visible(self.payload, seen):
                return FakeReply(text=CLEAN_DIRECTIVE)
            self.saw_attack = True
            return FakeReply(text=f"{CLEAN_DIRECTIVE} {' '.join(self.payload.split())}")
        return echo_reply(body)


@dataclass
class PathResult:
    offered: int = 0
    refused_as_injection: int = 0
    refused_otherwise: int = 0
    stored: int = 0
    deduplicated: int = 0  # accepted, but the same content was already stored (nothing new written)
    not_seen: int = 0  # extraction: the model was never shown the attack

    def add(self, other: PathResult) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class ItemOutcome:
    id: str
    category: str
    paths: dict[str, PathResult] = field(default_factory=dict)
    stored_rows: list[dict[str, Any]] = field(default_factory=list)
    instruction_rows: list[dict[str, Any]] = field(default_factory=list)
    unfenced_static: list[str] = field(default_factory=list)  # why, when it is
    unfenced_dynamic: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    injection_refusals: int = 0

    @property
    def refused(self) -> bool:
        return not self.stored_rows
