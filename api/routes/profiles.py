"""Who the agent is (per tenant) and what it knows about a user's profile."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status

from api.deps import AdminKey, MemoryReadKey, MemoryWriteKey, TenantDep
from api.errors import ApiError
from api.schemas.common import ID_PATTERN
from api.schemas.profiles import AgentProfileOut, AgentProfilePatch, UserProfileOut, UserProfilePatch
from shared.context.profiles import (
    ProfileTooLarge,
    UnknownPreset,
    get_agent_profile,
    get_user_profile,
    list_presets,
    patch_user_profile,
    put_agent_profile,
)
from shared.infra import db
from shared.turns.accept import ensure_user

router = APIRouter(prefix="/v1", tags=["profiles"])


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
    from shared.turns.accept import find_user_id

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
