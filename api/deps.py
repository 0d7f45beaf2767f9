"""Request dependencies: authentication (API key → principal) and authorisation (scopes, bound user).

Every `/v1` route names the scope it needs by its parameter's type (`ChatKey`, `MemoryReadKey`,
`MemoryWriteKey`, `AdminKey`, or `TenantDep` for any valid key). A key bound to one user is also
checked against the `user_id` in the path or query here, so no route can forget it; routes that
take the user from the body or from a stored row call `check_user` themselves. Every authenticated
request takes a token from its key's and its tenant's rate-limit buckets (429 + Retry-After).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from shared.access.auth import Principal, authenticate
from shared.access.ratelimit import request_limits, take
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.redis_client import get_redis

_bearer = HTTPBearer(auto_error=False, description="An engram API key: `Authorization: Bearer egm_…`")


def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise ApiError(
            status.HTTP_401_UNAUTHORIZED,
            "missing API key: send `Authorization: Bearer <key>`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    with db.connection(autocommit=True) as conn:  # one statement: no BEGIN and COMMIT round trips
        principal = authenticate(conn, credentials.credentials)
    if principal is None:
        raise ApiError(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"}
        )
    for user_id in (request.path_params.get("user_id"), request.query_params.get("user_id")):
        if isinstance(user_id, str):
            check_user(principal, user_id)
    rate_limit(principal)
    return principal


def rate_limit(principal: Principal) -> None:
    settings = get_settings()
    limits = request_limits(
        principal.id,
        principal.key_id,
        key_rate=settings.rate_limit_key_per_second,
        key_burst=settings.rate_limit_key_burst,
        tenant_rate=settings.rate_limit_tenant_per_second,
        tenant_burst=settings.rate_limit_tenant_burst,
    )
    refusal = take(get_redis(), limits)
    if refusal is not None:
        raise ApiError(
            status.HTTP_429_TOO_MANY_REQUESTS,
            refusal.message(),
            code="rate_limited",
            headers={"Retry-After": str(refusal.retry_after_s)},
        )


def check_user(principal: Principal, user_external_id: str) -> None:
    """403 when a user-bound key asks for another user."""
    if not principal.may_act_for(user_external_id):
        raise ApiError(
            status.HTTP_403_FORBIDDEN,
            f"this API key is bound to user {principal.user_external_id!r} and cannot act for another user",
            code="wrong_user",
        )


def require(scope: str) -> Callable[[Principal], Awaitable[Principal]]:
    # async: it only reads the principal, and a sync dependency costs every request a trip through the
    # thread pool (a GIL hand-off each way, which under a burst of requests is what they wait for).
    async def dependency(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        if not principal.allows(scope):
            raise ApiError(
                status.HTTP_403_FORBIDDEN,
                f"this API key lacks the scope {scope!r} (it has: {', '.join(sorted(principal.scopes))})",
                code="missing_scope",
            )
        return principal

    dependency.__name__ = f"require_{scope.replace(':', '_')}"
    return dependency


TenantDep = Annotated[Principal, Depends(current_principal)]
ChatKey = Annotated[Principal, Depends(require("chat"))]
MemoryReadKey = Annotated[Principal, Depends(require("memory:read"))]
MemoryWriteKey = Annotated[Principal, Depends(require("memory:write"))]
AdminKey = Annotated[Principal, Depends(require("admin"))]
MetricsKey = Annotated[Principal, Depends(require("metrics"))]
