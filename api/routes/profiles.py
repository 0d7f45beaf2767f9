"""Who the agent is (per tenant) and what it knows about a user's profile."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.deps import AdminKey, MemoryReadKey, MemoryWriteKey, TenantDep
from api.errors import ApiError
from api.schemas import ID_PATTERN
from shared import db
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
    ProfileTooLarge,
    UnknownPreset,
    get_agent_profile,
    get_user_profile,
    list_presets,
    patch_user_profile,
    put_agent_profile,
    text_chars,
)
from shared.text import SAFE_TEXT
from shared.turns import ensure_user

router = APIRouter(prefix="/v1", tags=["profiles"])


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


class RuleItem(BaseModel):
    text: NoteText
    enabled: bool = True


class RuleSection(BaseModel):
    title: Short
    items: list[RuleItem] = Field(max_length=MAX_NOTE_ITEMS)


class StructuredNotes(BaseModel):
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


class AgentProfilePatch(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
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


class UserProfilePatch(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
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


@router.get("/personality-presets")
def presets(_tenant: TenantDep) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return list_presets(conn)


@router.get("/agent-profile", response_model=AgentProfileOut)
def read_agent_profile(tenant: TenantDep) -> AgentProfileOut:
    with db.connection() as conn:
        profile = get_agent_profile(conn, tenant.id)
    if profile is None:  # nothing configured: the prompt falls back to context files or a minimal identity
        return AgentProfileOut(configured=False)
    return AgentProfileOut(configured=True, **profile)


@router.patch(
    "/agent-profile",
    response_model=AgentProfileOut,
    responses={422: {"description": "Invalid field, unknown preset (unknown_preset) or profile too large"}},
)
def update_agent_profile(body: AgentProfilePatch, tenant: AdminKey) -> AgentProfileOut:
    values = body.model_dump(exclude_unset=True, mode="json")
    try:
        with db.connection() as conn:
            profile = put_agent_profile(conn, tenant.id, values)
    except UnknownPreset as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc), code="unknown_preset") from exc
    except ProfileTooLarge as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    return AgentProfileOut(configured=True, **profile)


def _zone_ok(name: str) -> bool:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@router.get("/users/{user_id}/profile", response_model=UserProfileOut, responses={404: {"description": "No user"}})
def read_user_profile(user_id: Annotated[str, Path(pattern=ID_PATTERN)], tenant: MemoryReadKey) -> UserProfileOut:
    from shared.turns import find_user_id

    with db.connection() as conn:
        internal = find_user_id(conn, tenant.id, user_id)
        profile = get_user_profile(conn, tenant.id, internal) if internal else None
    if profile is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {user_id!r}")
    return UserProfileOut(user_id=profile.pop("external_id"), **profile)


@router.patch(
    "/users/{user_id}/profile",
    response_model=UserProfileOut,
    responses={422: {"description": "Invalid field, e.g. an unknown time zone, or profile too large"}},
)
def update_user_profile(
    user_id: Annotated[str, Path(pattern=ID_PATTERN)], body: UserProfilePatch, tenant: MemoryWriteKey
) -> UserProfileOut:
    values = body.model_dump(exclude_unset=True)
    if values.get("timezone") and not _zone_ok(values["timezone"]):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"unknown time zone {values['timezone']!r}; use an IANA name such as Europe/Lisbon",
        )
    try:
        with db.connection() as conn:
            profile = patch_user_profile(conn, tenant.id, ensure_user(conn, tenant.id, user_id), values)
    except ProfileTooLarge as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    assert profile is not None
    return UserProfileOut(user_id=profile.pop("external_id"), **profile)
