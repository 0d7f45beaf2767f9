"""Bodies of the turns API (`/v1/sessions/{key}/turns`, `/v1/turns/{id}`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from api.schemas.common import ID_PATTERN, RequestBody, SpeakerName
from shared.text import SafeText

TurnStatus = Literal["queued", "running", "done", "failed"]


class TurnIn(RequestBody):
    user_id: str = Field(pattern=ID_PATTERN, description="Your id for the user (letters, digits, ._:@-)")
    # The schema states the rule (not empty, not only whitespace); the validator enforces it with a
    # plainer message than a pattern mismatch. The length limit is a setting (ENGRAM_MAX_TURN_CHARS, 413).
    text: SafeText = Field(
        description="The user's message: not blank, no NUL, valid Unicode; at most ENGRAM_MAX_TURN_CHARS "
        "characters (longer is 413)",
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
    )
    name: SpeakerName | None = Field(
        None,
        description="Who is speaking, as the conversation names them: the speaker of this message in transcript "
        "excerpts and in what extraction reads (default: the user's profile display_name, else the role)",
    )

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be empty")
        return value


class TurnAccepted(BaseModel):
    turn_id: int
    session_id: int
    status: TurnStatus


class TurnOut(BaseModel):
    turn_id: int
    session_id: int
    session_key: str
    user_id: str
    status: TurnStatus
    reply: str | None = None
    error: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict, description="input/output/cache read/cache write tokens")
    timings: dict[str, Any] = Field(default_factory=dict, description="queued_ms, run_ms, llm_ms, overhead_ms")
    attempts: int
    llm_calls: dict[str, dict[str, int]] = Field(default_factory=dict, description="This turn's LLM calls by purpose")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
