"""API keys (admin): the tenant's keys, and create, rotate and revoke; a new secret is shown once, in the
response that made it, and never again."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.filters import Filters
from api.console.render import page
from api.console.session import Admin, AdminPost, ConsoleError, Signed
from shared.access.auth import DEFAULT_SCOPES, SCOPES
from shared.access.keys import KeyRequestInvalid, create_api_key, list_api_keys, revoke_api_key, rotate_api_key
from shared.console.paging import make_page, page_bounds
from shared.infra import db

router = APIRouter(prefix="/console/keys", include_in_schema=False)
KeyId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _page(
    request: Request,
    signed: Signed,
    *,
    issued: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    values: dict[str, Any] | None = None,
    code: int = 200,
    number: int = 1,
) -> HTMLResponse:
    """The keys page: a page of the tenant's active keys, newest first (a key just made is on the first)."""
    limit, offset = page_bounds(number)
    with db.connection() as conn:
        rows = list_api_keys(conn, signed.principal.id, newest_first=True, limit=limit, offset=offset)
    keys = make_page(rows, number)
    return page(
        request,
        "keys.html",
        signed,
        {
            "keys": keys,
            "issued": issued,
            "errors": errors or {},
            "scopes": SCOPES,
            "values": values or {"scopes": list(DEFAULT_SCOPES)},
            "query": {},
        },
        status_code=code,
    )


@router.get("", response_class=HTMLResponse)
def keys_page(
    request: Request, signed: Admin, page_number: Annotated[str, Query(alias="page", max_length=2000)] = ""
) -> HTMLResponse:
    given = Filters()
    number = given.page(page_number)
    return _page(request, signed, errors=given.errors, code=given.status_code, number=number)


@router.post("", response_class=HTMLResponse)
def create_key(
    request: Request,
    signed: AdminPost,
    name: Annotated[str, Form(max_length=1000)] = "",
    scopes: Annotated[list[str] | None, Form(max_length=len(SCOPES))] = None,
    user_id: Annotated[str, Form(max_length=1000)] = "",
) -> HTMLResponse:
    values = {"name": name, "scopes": scopes or [], "user_id": user_id}
    try:
        with db.connection() as conn:
            issued = create_api_key(
                conn,
                signed.principal.id,
                name=name.strip(),
                scopes=scopes or [],  # none ticked: refused (an empty list, not the defaults)
                user_external_id=user_id.strip() or None,
            )
    except KeyRequestInvalid as exc:
        # Beside the field it concerns, as the memory forms show theirs.
        errors = {exc.field: str(exc)}
        return _page(request, signed, errors=errors, values=values, code=status.HTTP_422_UNPROCESSABLE_CONTENT)
    return _page(request, signed, issued={"key": issued.key, **issued.record}, code=status.HTTP_201_CREATED)


@router.post("/{key_id}/rotate", response_class=HTMLResponse)
def rotate_key(request: Request, key_id: KeyId, signed: AdminPost) -> HTMLResponse:
    with db.connection() as conn:
        issued = rotate_api_key(conn, signed.principal.id, key_id)
    if issued is None:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"no active key {key_id}")
    return _page(request, signed, issued={"key": issued.key, **issued.record})


@router.post("/{key_id}/revoke")
def revoke_key(key_id: KeyId, signed: AdminPost) -> Response:
    with db.connection() as conn:
        revoked = revoke_api_key(conn, signed.principal.id, key_id)
    if revoked is None:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"no active key {key_id}")
    return RedirectResponse("/console/keys", status_code=status.HTTP_303_SEE_OTHER)
