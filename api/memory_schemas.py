"""Bodies of the memory API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.memory.store import KINDS

Kind = Literal["fact", "episode", "preference", "style", "directive", "artifact", "reflection", "summary", "document"]
assert set(KINDS) == set(Kind.__args__)  # type: ignore[attr-defined]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryIn(_Strict):
    key: str = Field(min_length=1, max_length=1000, description="Normalised: lowercase, `-` for spaces")
    value: str = Field(min_length=1, max_length=20_000, description="At most 2,048 characters once cleaned")
    namespace: str | None = Field(None, max_length=1000, description="Default depends on kind, e.g. tacit/facts")
    kind: Kind = "fact"
    tags: list[str] = Field(default_factory=list, max_length=50)
    confidence: float = Field(1.0, ge=0, le=1)
    event_time: datetime | None = Field(None, description="When the remembered thing happened")


class MemoryPatch(_Strict):
    value: str | None = Field(None, min_length=1, max_length=20_000, description="A new value supersedes the memory")
    tags: list[str] | None = Field(None, max_length=50)
    confidence: float | None = Field(None, ge=0, le=1)
    decay_rate: float | None = Field(None, ge=0)
    event_time: datetime | None = None


class MemoryOut(BaseModel):
    id: int
    namespace: str
    key: str
    value: str
    kind: str
    tags: list[str]
    metadata: dict[str, Any]
    confidence: float
    decay_rate: float
    access_count: int
    last_accessed_at: datetime | None
    event_time: datetime | None
    valid_from: datetime
    valid_until: datetime | None
    source: str
    source_session_id: int | None
    supersedes_id: int | None
    created_at: datetime
    updated_at: datetime


class MemoryWriteOut(BaseModel):
    action: Literal["added", "superseded", "reinforced", "unchanged", "duplicate"]
    memory: MemoryOut
    replaced_id: int | None = None


class SearchFiltersIn(_Strict):
    namespace: str | None = Field(None, max_length=1000, description="Namespace prefix, e.g. tacit")
    kinds: list[Kind] | None = None
    tags: list[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    exclude_session: str | None = Field(None, description="Session key whose own memories and transcript to skip")
    include_superseded: bool = False
    include_transcripts: bool = True


class SearchIn(_Strict):
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=100)
    filters: SearchFiltersIn = Field(default_factory=SearchFiltersIn)
    mode: Literal["weighted", "rrf"] | None = Field(None, description="Fusion; default from ENGRAM_SEARCH_FUSION")


class SearchResultOut(BaseModel):
    id: int | None = Field(description="Memory id; null for a transcript block")
    source: Literal["memory", "transcript"]
    namespace: str
    key: str
    value: str
    kind: str
    score: float
    legs: dict[str, dict[str, Any]] = Field(description="Each search leg's rank and score for this result")
    chunk_id: int | None
    session_id: int | None
    tags: list[str]
    confidence: float | None
    created_at: datetime | None
    event_time: datetime | None


class SearchOut(BaseModel):
    results: list[SearchResultOut]


class MemoryEventOut(BaseModel):
    id: int
    memory_id: int | None
    action: str
    namespace: str
    key: str
    old_value: str | None
    new_value: str | None
    actor: str
    details: dict[str, Any]
    created_at: datetime
