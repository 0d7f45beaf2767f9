"""Bodies of the profiles API: the agent profile (per tenant) and a user's profile."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.common import RequestBody
from shared.context.profiles import (
    MAX_AGENT_NAME_CHARS,
    MAX_AGENT_PROFILE_CHARS,
    MAX_COMMUNICATION_STYLE_CHARS,
    MAX_EMOJI_CHARS,
    MAX_GOAL_CHARS,
    MAX_INTEREST_CHARS,
    MAX_NOTE_ITEM_CHARS,
    MAX_NOTE_ITEMS,
    MAX_NOTE_SECTIONS,
    MAX_NOTES_CHARS,
    MAX_PERSONALITY_CHARS,
    MAX_PRESET_NAME_CHARS,
    MAX_SHORT_FIELD_CHARS,
    MAX_USER_CONTEXT_CHARS,
    MAX_USER_LIST_ITEMS,
    MAX_USER_PROFILE_CHARS,
    text_chars,
)
from shared.text import SAFE_TEXT

# Each bounded text type once; all are SafeText (no NUL, valid Unicode).
Short = Annotated[str, Field(max_length=MAX_SHORT_FIELD_CHARS), SAFE_TEXT]
AgentName = Annotated[str, Field(min_length=1, max_length=MAX_AGENT_NAME_CHARS), SAFE_TEXT]
PresetName = Annotated[str, Field(max_length=MAX_PRESET_NAME_CHARS), SAFE_TEXT]
Personality = Annotated[str, Field(max_length=MAX_PERSONALITY_CHARS), SAFE_TEXT]
Emoji = Annotated[str, Field(max_length=MAX_EMOJI_CHARS), SAFE_TEXT]
NotesMarkdown = Annotated[str, Field(max_length=MAX_NOTES_CHARS), SAFE_TEXT]
NoteText = Annotated[str, Field(min_length=1, max_length=MAX_NOTE_ITEM_CHARS), SAFE_TEXT]
Interest = Annotated[str, Field(max_length=MAX_INTEREST_CHARS), SAFE_TEXT]
Goal = Annotated[str, Field(max_length=MAX_GOAL_CHARS), SAFE_TEXT]
UserContext = Annotated[str, Field(max_length=MAX_USER_CONTEXT_CHARS), SAFE_TEXT]
CommunicationStyle = Annotated[str, Field(max_length=MAX_COMMUNICATION_STYLE_CHARS), SAFE_TEXT]


class RuleItem(RequestBody):
    text: NoteText
    enabled: bool = True


class RuleSection(RequestBody):
    title: Short
    items: list[RuleItem] = Field(max_length=MAX_NOTE_ITEMS)


class StructuredNotes(RequestBody):
    sections: list[RuleSection] = Field(
        max_length=MAX_NOTE_SECTIONS,
        description=f"At most {MAX_NOTES_CHARS} characters of titles and items together",
    )

    @model_validator(mode="after")
    def _bounded(self) -> StructuredNotes:
        total = text_chars(self.model_dump())
        if total > MAX_NOTES_CHARS:
            raise ValueError(f"the sections hold {total} characters of text; the limit is {MAX_NOTES_CHARS}")
        return self


PRESET_DESCRIPTION = (
    "Name of a personality preset: one of those listed by GET /v1/personality-presets (installed: balanced, "
    "professional, creative, minimal, supportive). An unknown name is 422 unknown_preset."
)


class AgentProfilePatch(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={
            "description": "Every field goes into the prompt of every turn: each is bounded, and all fields "
            f"together (stored and sent) at most {MAX_AGENT_PROFILE_CHARS} characters (422 with the count otherwise)."
        },
    )
    name: AgentName | None = None
    personality_preset: PresetName | None = Field(None, description=PRESET_DESCRIPTION)
    custom_personality: Personality | None = None
    creature: Short | None = None
    role: Short | None = None
    vibe: Short | None = None
    emoji: Emoji | None = None
    voice_style: Short | None = None
    formality: Short | None = None
    emoji_usage: Short | None = None
    response_length: Short | None = None
    rules: StructuredNotes | None = None
    rules_markdown: NotesMarkdown | None = None
    tool_notes: StructuredNotes | None = None
    tool_notes_markdown: NotesMarkdown | None = None


class AgentProfileOut(BaseModel):
    # Plain types: what is stored is shown as it is, even if it predates a tighter input limit.
    model_config = ConfigDict(extra="ignore")
    configured: bool
    name: str | None = None
    personality_preset: str | None = None
    custom_personality: str | None = None
    creature: str | None = None
    role: str | None = None
    vibe: str | None = None
    emoji: str | None = None
    voice_style: str | None = None
    formality: str | None = None
    emoji_usage: str | None = None
    response_length: str | None = None
    rules: dict[str, Any] | None = None
    rules_markdown: str | None = None
    tool_notes: dict[str, Any] | None = None
    tool_notes_markdown: str | None = None
    updated_at: datetime | None = None


class UserProfilePatch(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={
            "description": "Part of every prompt for this user: each field is bounded, and all fields together "
            f"(stored and sent) at most {MAX_USER_PROFILE_CHARS} characters (422 with the count otherwise)."
        },
    )
    display_name: Short | None = None
    location: Short | None = None
    timezone: Short | None = None
    occupation: Short | None = None
    interests: Annotated[list[Interest] | None, Field(max_length=MAX_USER_LIST_ITEMS)] = None
    goals: Annotated[list[Goal] | None, Field(max_length=MAX_USER_LIST_ITEMS)] = None
    context: UserContext | None = None
    communication_style: CommunicationStyle | None = None


class UserProfileOut(BaseModel):
    model_config = ConfigDict(extra="ignore")
    user_id: str
    display_name: str | None = None
    location: str | None = None
    timezone: str | None = None
    occupation: str | None = None
    interests: list[str] | None = None
    goals: list[str] | None = None
    context: str | None = None
    communication_style: str | None = None
    updated_at: datetime
