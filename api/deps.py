"""Request dependencies: authentication (API key → tenant)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shared import db
from shared.auth import Tenant, authenticate

_bearer = HTTPBearer(auto_error=False, description="An engram API key: `Authorization: Bearer egm_…`")


def current_tenant(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Tenant:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API key: send `Authorization: Bearer <key>`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    with db.connection() as conn:
        tenant = authenticate(conn, credentials.credentials)
    if tenant is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"}
        )
    return tenant


TenantDep = Annotated[Tenant, Depends(current_tenant)]
