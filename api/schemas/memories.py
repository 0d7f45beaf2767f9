"""Bodies of the memory API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import ID_PATTERN, RequestBody, Timestamp
from shared.memory.keys import MAX_KEY_CHARS, MAX_VALUE_CHARS
from shared.memory.memory_input import KINDS, MAX_DECAY_RATE, MAX_NAMESPACE_CHARS, MAX_TAG_CHARS, MAX_TAGS
from shared.text import SAFE_TEXT, STORABLE_TEXT, SafeText

Kind = Literal["fact", "episode", "preference", "style", "directive", "artifact", "reflection", "summary", "document"]
assert set(KINDS) == set(Kind.__args__)  # type: ignore[attr-defined]


# Limits as the schema states them; the write path (shared/memory) applies them again to the cleaned
# text, so a value that passes here can still be refused (422 memory_rejected), e.g. as an injection.
# Keys are normalised (lowercase, `-` for spaces) and must be at most MAX_KEY_CHARS after that; the raw
# key may be a little longer (collapsed separators).
# The store cleans key and value (shared.memory.keys.sanitize) after scanning them as sent.
Key = Annotated[str, Field(min_length=1, max_length=2 * MAX_KEY_CHARS), STORABLE_TEXT]
Value = Annotated[str, Field(min_length=1, max_length=MAX_VALUE_CHARS), STORABLE_TEXT]
Namespace = Annotated[str, Field(max_length=MAX_NAMESPACE_CHARS), SAFE_TEXT]
Tag = Annotated[str, Field(max_length=MAX_TAG_CHARS), SAFE_TEXT]
Confidence = Annotated[float, Field(ge=0, le=1, description="0..1, kept to 6 decimal places")]


class MemoryIn(RequestBody):
    key: Key = Field(
        description=f"Normalised: lowercase, `-` for spaces; at most {MAX_KEY_CHARS} characters after that"
    )
    value: Value = Field(description=f"At most {MAX_VALUE_CHARS} characters, no NUL, valid Unicode")
    namespace: Namespace | None = Field(None, description="Default depends on kind, e.g. tacit/facts")
    kind: Kind = "fact"
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    confidence: Confidence = 1.0
    event_time: Timestamp | None = Field(None, description="When the remembered thing happened")


class MemoryPatch(RequestBody):
    value: Value | None = Field(None, description="A new value supersedes the memory")
    tags: list[Tag] | None = Field(None, max_length=MAX_TAGS)
    confidence: Confidence | None = None
    decay_rate: float | None = Field(None, ge=0, le=MAX_DECAY_RATE, description="Per day; 0 = never decays")
    event_time: Timestamp | None = None


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
    source_message_ids: list[int] = Field(description="The messages it was learned from (empty when written directly)")
    supersedes_id: int | None
    created_at: datetime
    updated_at: datetime


class MessageSourceOut(BaseModel):
    message_id: int
    session_key: str
    said_at: datetime
    speaker: str = Field(description="The name the conversation gave the speaker, else the role")
    excerpt: str | None = Field(None, description="The message's text (first 1,000 characters), when asked for")


class MemoryDetailOut(MemoryOut):
    sources: list[MessageSourceOut] = Field(
        description="The messages it was learned from that still exist, in the order they were said (up to 20)"
    )


class MemoryWriteOut(BaseModel):
    action: Literal["added", "superseded", "reinforced", "unchanged", "duplicate"]
    memory: MemoryOut
    replaced_id: int | None = None


class SearchFiltersIn(RequestBody):
    namespace: Namespace | None = Field(None, description="Namespace prefix, e.g. tacit")
    kinds: list[Kind] | None = Field(None, max_length=len(KINDS))
    tags: list[Tag] | None = Field(None, max_length=MAX_TAGS, description="Memories carrying all of these tags")
    since: Timestamp | None = None
    until: Timestamp | None = None
    exclude_session: str | None = Field(
        None, pattern=ID_PATTERN, description="Session key whose own memories and transcript to skip"
    )
    include_superseded: bool = False
    include_transcripts: bool = True


class SearchIn(RequestBody):
    query: SafeText = Field(min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=100)
    filters: SearchFiltersIn = Field(default_factory=SearchFiltersIn)
    mode: Literal["weighted", "rrf"] | None = Field(None, description="Fusion; default from ENGRAM_SEARCH_FUSION")


class SearchResultOut(BaseModel):
    id: int | None = Field(description="Memory id; null for a transcript message")
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
    created_at: datetime | None = Field(description="A memory's creation; a transcript message's time it was said")
    event_time: datetime | None
    message_id: int | None = Field(None, description="A transcript result's message")
    speaker: str | None = Field(
        None, description="Who said a transcript result's message, or the first message a memory was learned from"
    )
    session_key: str | None = Field(
        None, description="A transcript result's conversation, or the one a memory was learned in"
    )
    valid_from: datetime | None = Field(None, description="A memory's: when it became true")
    source_message_ids: list[int] = Field(default_factory=list, description="A memory's: what it was learned from")


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
