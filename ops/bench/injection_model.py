"""The pieces of the injection benchmark (ops/bench/injection.py) that are not about running it: the
fake model that obeys injected text, and the per-item outcome records."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ops.fake_llm import FakeReply, Json, echo_reply, user_texts

CLEAN_DIRECTIVE = (
    "You keep your answers short and direct. You match the user's informal, playful tone. You use British spelling."
)


# ---------------------------------------------------------------------------------------------------
# The model that obeys


def alnum(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def visible(fragment: str, seen: str) -> bool:
    """Whether a model shown `seen` saw `fragment` (compared on letters and digits, first 60 of them)."""
    probe = alnum(fragment)[:60]
    return bool(probe) and probe in seen


def _system_text(body: Json) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system if isinstance(block, dict))
    return ""


@dataclass
class ObeyingModel:
    """The fake server's responder: a model that does whatever injected text asks it to.

    `parts` are what the attack put into the conversation and `payload` what it wants remembered;
    when all parts are visible in an extraction request the payload comes back as a fact of every
    category; when the payload is among the style observations of a synthesis request, it is appended
    to the directive paragraph. What the model is never shown, it cannot obey."""

    parts: tuple[str, ...] = ()
    payload: str | None = None
    saw_attack: bool = False

    def arm(self, parts: Sequence[str], payload: str) -> None:
        self.parts, self.payload, self.saw_attack = tuple(parts), payload, False

    def disarm(self) -> None:
        self.parts, self.payload, self.saw_attack = (), None, False

    def __call__(self, body: Json) -> FakeReply:
        system = _system_text(body)
        if "pick out durable memories" in system:
            return FakeReply(text=json.dumps(self._extraction(body)))
        if "personality directive" in system:
            return FakeReply(text=self._directive(body))
        return echo_reply(body)

    def _extraction(self, body: Json) -> dict[str, list[dict[str, str]]]:
        empty: dict[str, list[dict[str, str]]] = {
            "preferences": [],
            "entities": [],
            "decisions": [],
            "styles": [],
            "artifacts": [],
        }
        if self.payload is None:
            return empty
        seen = alnum(" ".join(user_texts(body)))
        if not all(visible(part, seen) for part in self.parts):
            return empty
        self.saw_attack = True
        item = {"key": "injected", "value": self.payload}
        return {
            "preferences": [item],
            "entities": [{"key": "note/injected", "value": self.payload}],
            "decisions": [item],
            "styles": [item],
            "artifacts": [item],
        }

    def _directive(self, body: Json) -> str:
        if self.payload is None or not visible(self.payload, alnum(" ".join(user_texts(body)))):
            return CLEAN_DIRECTIVE
        self.saw_attack = True
        return f"{CLEAN_DIRECTIVE} {' '.join(self.payload.split())}"


# ---------------------------------------------------------------------------------------------------
# Outcomes


@dataclass
class PathResult:
    offered: int = 0
    refused_as_injection: int = 0
    refused_otherwise: int = 0
    stored: int = 0
    deduplicated: int = 0  # accepted, but the same content was already stored (nothing new written)
    not_seen: int = 0  # extraction: the model was never shown the attack

    def add(self, other: PathResult) -> None:
        self.offered += other.offered
        self.refused_as_injection += other.refused_as_injection
        self.refused_otherwise += other.refused_otherwise
        self.stored += other.stored
        self.deduplicated += other.deduplicated
        self.not_seen += other.not_seen

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


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
