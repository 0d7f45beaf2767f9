"""Bodies of message ingest (`POST /v1/users/{id}/sessions/{key}/messages`) and of a session's memory
status (`GET …/memory-status`)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from api.schemas.common import RequestBody, SpeakerName, Timestamp
from shared.text import SAFE_TEXT, SafeText, text_problem

MAX_MESSAGE_KEY_CHARS = 200
MAX_METADATA_CHARS = 8_000
MAX_METADATA_DEPTH = 8

Role = Literal["user", "assistant", "system", "tool"]
MessageKey = Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_KEY_CHARS), SAFE_TEXT]


class IngestMessageIn(RequestBody):
    role: Role
    content: SafeText = Field(
        description="The message text: not blank, no NUL, valid Unicode; at most ENGRAM_INGEST_MAX_MESSAGE_CHARS "
        "characters (longer is 413)",
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
    )
    created_at: Timestamp | None = Field(None, description="When it was said (ISO-8601); default: when it arrives")
    name: SpeakerName | None = Field(None, description="The speaker's or the tool's name")
    idempotency_key: MessageKey | None = Field(
        None,
        description="Unique per session: a message whose key is already stored is not written again (its id is "
        "answered); the same key with another role or content is 409. `engram import` sets one per message.",
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be empty")
        return value


def _storable(value: Any, depth: int = 0) -> None:
    """Postgres jsonb holds no NUL, no lone surrogate and no NaN/Infinity: refuse them here (422), not there."""
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise ValueError(f"metadata text {problem}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("metadata numbers must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(key, depth + 1)
            _storable(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _storable(item, depth + 1)


class IngestIn(RequestBody):
    messages: list[IngestMessageIn] = Field(
        min_length=1,
        description="In conversation order; at most ENGRAM_INGEST_MAX_MESSAGES (more is 413). One invalid "
        "message refuses the whole batch: nothing is written.",
    )
    metadata: dict[str, Any] | None = Field(
        None, description=f"Kept with the batch; a JSON object of at most {MAX_METADATA_CHARS} characters"
    )

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        _storable(value)
        size = len(json.dumps(value, ensure_ascii=False))
        if size > MAX_METADATA_CHARS:
            raise ValueError(f"metadata is {size} characters as JSON; the limit is {MAX_METADATA_CHARS}")
        return value


class IngestAccepted(BaseModel):
    session_id: int
    message_ids: list[int] = Field(description="One per message sent, in order")
    new_messages: int = Field(
        description="Messages this batch stored: fewer than sent when message keys were known (a replay answers as the "
        "first call did)"
    )
    status: Literal["queued"] = Field(description="Stored; extraction and the rest of the pipeline follow")


class MemoryStatusOut(BaseModel):
    session_key: str
    user_id: str
    session_id: int
    messages: int = Field(description="Messages in the session")
    pending_messages: int = Field(description="Messages not mined for memories yet")
    last_extracted_at: datetime | None = Field(description="When the session's last extraction marked messages")
    last_extracted_message_id: int
    memories_created: int = Field(description="Active memories whose source is this session")
    memories_pending_embedding: int = Field(
        description="Of those, not embedded yet: full-text search finds them already, vector search not yet"
    )
    compaction_count: int
    compaction_due: bool = Field(description="The session is over the compaction threshold: a compaction is queued")
    transcript_pending_messages: int = Field(
        description="Messages whose transcript unit waits for its vector (full text finds them already; "
        "search by meaning follows within seconds)"
    )
    idle: bool = Field(
        description="Every message is mined, every memory from it embedded, no compaction due and every "
        "message's transcript unit embedded"
    )
