"""The gateway's response bodies as the client reads them. Names and fields are those of the OpenAPI
schema's components (`/openapi.json`); a test in the server repo checks every model here against it, so
a change on one side fails there rather than in a user's program. Unknown fields are ignored, so a newer
gateway that adds one still parses."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

SectionName = Literal[
    "profile", "active_task", "summary", "relevant_memories", "transcript", "what_you_know", "reflection"
]


class IngestAccepted(BaseModel):
    session_id: int
    message_ids: list[int] = Field(description="One per message sent, in order")
    new_messages: int = Field(description="Messages this batch stored (fewer than sent when message keys were known)")
    status: Literal["queued"]


class MemoryStatusOut(BaseModel):
    session_key: str
    user_id: str
    session_id: int
    messages: int
    pending_messages: int = Field(description="Messages not mined for memories yet")
    last_extracted_at: datetime | None
    last_extracted_message_id: int
    memories_created: int = Field(description="Active memories whose source is this session")
    memories_pending_embedding: int
    compaction_count: int
    compaction_due: bool
    transcript_pending_messages: int
    idle: bool = Field(description="Everything from the session is mined, embedded and compacted")


class ContextSourceOut(BaseModel):
    session_key: str | None = None
    said_at: datetime | None
    speaker: str | None = None
    message_ids: list[int]


class ContextItemOut(BaseModel):
    id: str = Field(description="memory:<id>, message:<id>, profile:<field> or session:<id>:task|summary")
    kind: str
    text: str
    score: float | None = None
    source: ContextSourceOut | None = None


class ContextSectionOut(BaseModel):
    name: SectionName
    tokens: int
    items: list[ContextItemOut]


class ContextOut(BaseModel):
    context: str = Field(description="The fenced block to put in a prompt (empty when nothing fits or is known)")
    tokens: int = Field(description="Tokens of `context`; at most max_tokens")
    max_tokens: int
    tokenizer: str
    sections: list[ContextSectionOut]
    dropped_items: int


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
    source_message_ids: list[int]
    supersedes_id: int | None
    created_at: datetime
    updated_at: datetime


class MessageSourceOut(BaseModel):
    message_id: int
    session_key: str
    said_at: datetime
    speaker: str
    excerpt: str | None = None


class MemoryDetailOut(MemoryOut):
    sources: list[MessageSourceOut]


class MemoryWriteOut(BaseModel):
    action: Literal["added", "superseded", "reinforced", "unchanged", "duplicate"]
    memory: MemoryOut
    replaced_id: int | None = None


class SearchResultOut(BaseModel):
    id: int | None = Field(description="Memory id; null for a transcript message")
    source: Literal["memory", "transcript"]
    namespace: str
    key: str
    value: str
    kind: str
    score: float
    legs: dict[str, dict[str, Any]]
    chunk_id: int | None
    session_id: int | None
    tags: list[str]
    confidence: float | None
    created_at: datetime | None
    event_time: datetime | None
    message_id: int | None = None
    speaker: str | None = None
    session_key: str | None = None
    valid_from: datetime | None = None
    source_message_ids: list[int] = Field(default_factory=list)


class SearchOut(BaseModel):
    results: list[SearchResultOut]
