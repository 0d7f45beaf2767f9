"""Erasing a user (GDPR): everything of theirs, in one transaction, behind a typed confirmation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console.memories import UserId, user_scope
from api.console.render import page
from api.console.session import MemoryReader, MemoryWriter, Signed
from shared.infra import db
from shared.infra.redis_client import get_redis
from shared.memory.userdata import drop_live_state, erase_user

router = APIRouter(prefix="/console/users/{user_id}/erase", include_in_schema=False)


def _form(request: Request, signed: Signed, user_id: str, *, error: str = "", code: int = 200) -> HTMLResponse:
    with db.connection() as conn:
        user_scope(conn, signed.principal.id, user_id)  # an unknown user: 404, not a form
    return page(request, "erase.html", signed, {"user_id": user_id, "error": error}, status_code=code)


@router.get("", response_class=HTMLResponse)
def erase_form(request: Request, user_id: UserId, signed: MemoryReader) -> HTMLResponse:
    return _form(request, signed, user_id)


@router.post("")
def erase(
    request: Request, user_id: UserId, signed: MemoryWriter, confirm: Annotated[str, Form(max_length=200)] = ""
) -> Response:
    if confirm.strip() != user_id:
        return _form(
            request,
            signed,
            user_id,
            error=f"Type the user id {user_id} exactly to erase the user.",
            code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )
    with db.connection() as conn:
        erasure = erase_user(conn, user_scope(conn, signed.principal.id, user_id))
    drop_live_state(get_redis(), erasure)
    return RedirectResponse(f"/console/users?erased={user_id}", status_code=status.HTTP_303_SEE_OTHER)
