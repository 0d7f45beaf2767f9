"""Tenant administration (scope `admin`): API keys and the token budget, acting on the caller's own
tenant; and the maintenance jobs (shared by every tenant: schedules and run records, no user data)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status

from api.deps import AdminKey
from api.errors import ApiError
from api.schemas.admin import IssuedKeyOut, KeyIn, KeyOut, TenantOut, TenantPatch
from api.schemas.jobs import JobOut
from shared.access.keys import KeyRequestInvalid, create_api_key, list_api_keys, revoke_api_key, rotate_api_key
from shared.access.quotas import budget_usage, set_budget
from shared.infra import db
from shared.infra.config import get_settings

router = APIRouter(prefix="/v1/admin", tags=["admin"])
KeyId = Annotated[int, Path(ge=1, le=2**63 - 1)]
NO_KEY: dict[int | str, dict[str, Any]] = {404: {"description": "No such active key in this tenant"}}


def _out(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "scopes": list(record["scopes"]), "user_id": record["user_external_id"]}


@router.post("/keys", status_code=status.HTTP_201_CREATED, response_model=IssuedKeyOut)
def create_key(body: KeyIn, principal: AdminKey) -> IssuedKeyOut:
    try:
        with db.connection() as conn:
            issued = create_api_key(
                conn, principal.id, name=body.name, scopes=body.scopes, user_external_id=body.user_id
            )
    except KeyRequestInvalid as exc:
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    return IssuedKeyOut(**_out(issued.record), key=issued.key)


@router.get("/keys", response_model=list[KeyOut])
def list_keys(principal: AdminKey, include_revoked: Annotated[bool, Query()] = False) -> list[KeyOut]:
    with db.connection() as conn:
        return [KeyOut(**_out(row)) for row in list_api_keys(conn, principal.id, include_revoked=include_revoked)]


@router.delete("/keys/{key_id}", response_model=KeyOut, responses=NO_KEY)
def revoke_key(key_id: KeyId, principal: AdminKey) -> KeyOut:
    with db.connection() as conn:
        record = revoke_api_key(conn, principal.id, key_id)
    if record is None:
        raise ApiError(status.HTTP_404_NOT_FOUND, f"no active key {key_id}")
    return KeyOut(**_out(record))


@router.post("/keys/{key_id}/rotate", response_model=IssuedKeyOut, responses=NO_KEY)
def rotate_key(key_id: KeyId, principal: AdminKey) -> IssuedKeyOut:
    """A new secret with the same name, scopes and user; the old key stops working at once."""
    with db.connection() as conn:
        issued = rotate_api_key(conn, principal.id, key_id)
    if issued is None:
        raise ApiError(status.HTTP_404_NOT_FOUND, f"no active key {key_id}")
    return IssuedKeyOut(**_out(issued.record), key=issued.key)


def _tenant_out(conn: db.Conn, principal: AdminKey) -> TenantOut:
    usage = budget_usage(conn, principal.id)
    assert usage is not None  # the key's own tenant
    return TenantOut(
        id=principal.id,
        name=principal.name,
        monthly_token_budget=usage["budget"],
        tokens_used_this_month=int(usage["used"]),
    )


@router.get("/tenant", response_model=TenantOut)
def read_tenant(principal: AdminKey) -> TenantOut:
    with db.connection() as conn:
        return _tenant_out(conn, principal)


@router.patch("/tenant", response_model=TenantOut)
def update_tenant(body: TenantPatch, principal: AdminKey) -> TenantOut:
    with db.connection() as conn:
        set_budget(conn, principal.id, body.monthly_token_budget)
        return _tenant_out(conn, principal)


@router.get("/jobs", response_model=list[JobOut])
def list_jobs(principal: AdminKey) -> list[JobOut]:
    """Each maintenance job: schedule, enabled, last run (start, duration, counts, error), next run."""
    from shared.maintenance.jobs import overview

    with db.connection() as conn:
        return [JobOut(**job) for job in overview(conn, get_settings())]
