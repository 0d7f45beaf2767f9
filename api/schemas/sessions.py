"""Bodies of the sessions API: state, history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class MessageOut(BaseModel):
    id: int
    turn_id: int | None
    role: str
    name: str | None = None  # who said it, when the conversation named them (the speaker, or a tool's name)
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_results: dict[str, Any] | None = None
    is_compacted: bool
    created_at: datetime


class MessagesOut(BaseModel):
    session_key: str
    user_id: str
    messages: list[MessageOut]


class SessionOut(BaseModel):
    session_id: int
    session_key: str
    user_id: str
    channel: str
    summary: str | None
    active_task: str | None
    token_count: int
    compaction_count: int
    memory_flush_compaction_count: int
    last_extracted_message_id: int
    last_embedded_message_id: int
    last_flushed_message_id: int
    recovery_pending: bool
    compacted_at: datetime | None
    created_at: datetime
    updated_at: datetime
    llm_calls: dict[str, dict[str, int]] = Field(description="LLM calls and tokens by purpose for this session")
