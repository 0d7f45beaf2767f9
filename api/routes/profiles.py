"""Who the agent is (per tenant) and what it knows about a user's profile."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, ConfigDict, Field

from api.deps import TenantDep
from api.schemas import ID_PATTERN
from shared import db
from shared.context.profiles import (
    UnknownPreset,
    get_agent_profile,
    get_user_profile,
    list_presets,
    patch_user_profile,
    put_agent_profile,
)
from shared.turns import ensure_user

router = APIRouter(prefix="/v1", tags=["profiles"])

Short = Annotated[str | None, Field(max_length=200)]


class RuleItem(BaseModel):
    text: str = Field(min_length=1, max_length=1000)
    enabled: bool = True


class RuleSection(BaseModel):
    title: str = Field(max_length=200)
    items: list[RuleItem] = Field(max_length=100)


class StructuredNotes(BaseModel):
    sections: list[RuleSection] = Field(max_length=50)


class AgentProfilePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str | None, Field(min_length=1, max_length=80)] = None
    personality_preset: Short = None
    custom_personality: Annotated[str | None, Field(max_length=10_000)] = None
    creature: Short = None
    role: Short = None
    vibe: Short = None
    emoji: Annotated[str | None, Field(max_length=16)] = None
    voice_style: Short = None
    formality: Short = None
    emoji_usage: Short = None
    response_length: Short = None
    rules: StructuredNotes | None = None
    rules_markdown: Annotated[str | None, Field(max_length=10_000)] = None
    tool_notes: StructuredNotes | None = None
    tool_notes_markdown: Annotated[str | None, Field(max_length=10_000)] = None


class AgentProfileOut(AgentProfilePatch):
    model_config = ConfigDict(extra="ignore")
    configured: bool
    updated_at: datetime | None = None


class UserProfilePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    display_name: Short = None
    location: Short = None
    timezone: Short = None
    occupation: Short = None
    interests: Annotated[list[Annotated[str, Field(max_length=200)]] | None, Field(max_length=50)] = None
    goals: Annotated[list[Annotated[str, Field(max_length=500)]] | None, Field(max_length=50)] = None
    context: Annotated[str | None, Field(max_length=5000)] = None
    communication_style: Annotated[str | None, Field(max_length=1000)] = None


class UserProfileOut(UserProfilePatch):
    model_config = ConfigDict(extra="ignore")
    user_id: str
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


@router.patch("/agent-profile", response_model=AgentProfileOut, responses={422: {"description": "Unknown preset"}})
def update_agent_profile(body: AgentProfilePatch, tenant: TenantDep) -> AgentProfileOut:
    values = body.model_dump(exclude_unset=True, mode="json")
    try:
        with db.connection() as conn:
            profile = put_agent_profile(conn, tenant.id, values)
    except UnknownPreset as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    return AgentProfileOut(configured=True, **profile)


def _zone_ok(name: str) -> bool:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


@router.get("/users/{user_id}/profile", response_model=UserProfileOut, responses={404: {"description": "No user"}})
def read_user_profile(user_id: Annotated[str, Path(pattern=ID_PATTERN)], tenant: TenantDep) -> UserProfileOut:
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
    responses={422: {"description": "Invalid field, e.g. an unknown time zone"}},
)
def update_user_profile(
    user_id: Annotated[str, Path(pattern=ID_PATTERN)], body: UserProfilePatch, tenant: TenantDep
) -> UserProfileOut:
    values = body.model_dump(exclude_unset=True)
    if values.get("timezone") and not _zone_ok(values["timezone"]):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"unknown time zone {values['timezone']!r}; use an IANA name such as Europe/Lisbon",
        )
    with db.connection() as conn:
        profile = patch_user_profile(conn, tenant.id, ensure_user(conn, tenant.id, user_id), values)
    assert profile is not None
    return UserProfileOut(user_id=profile.pop("external_id"), **profile)
