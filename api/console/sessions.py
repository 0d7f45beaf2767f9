"""A user's sessions, a session's transcript, and what the model sees on its next request."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import HTMLResponse

from api.console.filters import Filters
from api.console.memories import UserId, user_scope
from api.console.render import page
from api.console.session import ChatReader, ConsoleError
from api.schemas.common import ID_PATTERN
from shared.console.sessions import list_sessions, transcript
from shared.context.inspect import inspect_session
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.replicas import read

router = APIRouter(prefix="/console/users/{user_id}/sessions", include_in_schema=False)

SessionKey = Annotated[str, Path(pattern=ID_PATTERN)]
Channel = Annotated[str, Query(pattern=ID_PATTERN)]
PageNumber = Annotated[str, Query(alias="page", max_length=2000)]


@router.get("", response_class=HTMLResponse)
def sessions(
    request: Request,
    user_id: UserId,
    signed: ChatReader,
    page_number: PageNumber = "",
) -> HTMLResponse:
    given = Filters()
    number = given.page(page_number)
    found = read(lambda conn: list_sessions(conn, user_scope(conn, signed.principal.id, user_id), page=number))
    context = {"user_id": user_id, "sessions": found, "query": {}, "errors": given.errors}
    return page(request, "sessions.html", signed, context, status_code=given.status_code)


@router.get("/{session_key}", response_class=HTMLResponse)
def session_transcript(
    request: Request,
    user_id: UserId,
    session_key: SessionKey,
    signed: ChatReader,
    channel: Channel = "api",
    page_number: PageNumber = "",
    message: Annotated[int, Query(ge=0, le=2**63 - 1, description="Show the page holding this message")] = 0,
) -> HTMLResponse:
    given = Filters()
    number = given.page(page_number)
    with db.connection() as conn:
        found = transcript(
            conn,
            signed.principal.id,
            user_id,
            session_key,
            channel=channel,
            page=number,
            message_id=message,
        )
    if found is None:
        raise ConsoleError(status.HTTP_404_NOT_FOUND, f"user {user_id!r} has no session {session_key!r}")
    return page(
        request,
        "transcript.html",
        signed,
        {
            "user_id": user_id,
            "session_key": session_key,
            "t": found,
            "highlight": message,
            "query": {"channel": channel if channel != "api" else ""},
            "errors": given.errors,
        },
        status_code=given.status_code,
    )


@router.get("/{session_key}/context", response_class=HTMLResponse)
def session_context(request: Request, user_id: UserId, session_key: SessionKey, signed: ChatReader) -> HTMLResponse:
    with db.connection() as conn:
        user_scope(conn, signed.principal.id, user_id)  # another tenant's user: not found
        view = inspect_session(
            conn, get_settings(), tenant_id=signed.principal.id, user_external_id=user_id, session_key=session_key
        )
    return page(request, "context.html", signed, {"user_id": user_id, "session_key": session_key, "view": view})
