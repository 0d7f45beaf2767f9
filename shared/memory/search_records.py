"""The records a search takes and gives: its filters and options, a result, and a search of `find_many`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

FusionMode = Literal["weighted", "rrf"]
# "text" is the lexical leg: full text, with the ILIKE fallback when full text finds nothing.
Leg = Literal["text", "vector", "entity"]
ALL_LEGS: tuple[Leg, ...] = ("text", "vector", "entity")


@dataclass
class SearchFilters:
    namespace_prefix: str | None = None
    kinds: Sequence[str] | None = None
    tags: Sequence[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    exclude_session_id: int | None = None
    include_superseded: bool = False
    include_transcripts: bool = True


@dataclass
class SearchOptions:
    limit: int = 10
    mode: FusionMode = "weighted"
    rrf_k: int = 60
    vector_weight: float = 0.7
    # Keep results scoring at least this share of the best one (0 keeps all; 1 only ties with the best).
    relative_floor: float = 0.3
    overfetch: int = 8
    # Which legs run; the others are left out of the SQL entirely (evaluation of one leg, or a
    # caller that wants exact lexical matching only). The vector leg also needs a query vector.
    legs: tuple[Leg, ...] = ALL_LEGS


@dataclass
class SearchResult:
    source: Literal["memory", "transcript"]
    id: int | None  # memory id; None for a transcript unit
    namespace: str
    key: str
    value: str
    kind: str
    score: float
    legs: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunk_id: int | None = None
    session_id: int | None = None
    created_at: datetime | None = None
    event_time: datetime | None = None
    tags: list[str] = field(default_factory=list)
    confidence: float | None = None
    # A transcript unit's message: its id, who said it and when (created_at is the same time), its session's key.
    # A memory's speaker and session_key are its source's: who said the first message it was learned from, and
    # the session it was learned in.
    message_id: int | None = None
    speaker: str | None = None
    session_key: str | None = None
    # A memory's: when it became true and the messages it was learned from.
    valid_from: datetime | None = None
    source_message_ids: list[int] = field(default_factory=list)

    @property
    def said_at(self) -> datetime | None:
        """When the words were said (a unit) or the fact became true (a memory)."""
        return self.created_at if self.source == "transcript" else (self.event_time or self.valid_from)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "kind": self.kind,
            "score": round(self.score, 6),
            "legs": self.legs,
            "chunk_id": self.chunk_id,
            "session_id": self.session_id,
            "tags": self.tags,
            "confidence": self.confidence,
            "created_at": self.created_at,
            "event_time": self.event_time,
            "message_id": self.message_id,
            "speaker": self.speaker,
            "session_key": self.session_key,
            "valid_from": self.valid_from,
            "source_message_ids": self.source_message_ids,
        }


@dataclass(frozen=True)
class Ask:
    """One search of `search.search_many`: a query, its vector (None = no vector leg) and its filters."""

    query: str
    query_vector: Sequence[float] | None = None
    filters: SearchFilters | None = None
