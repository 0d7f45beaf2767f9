"""Session history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status

from api.deps import ChatKey
from api.routes.turns import SessionKey
from api.schemas.common import ID_PATTERN
from api.schemas.sessions import MessageOut, MessagesOut, SessionOut
from shared.context.inspect import inspect_session
from shared.infra import db
from shared.infra.config import get_settings
from shared.llm.ledger import calls_by_purpose
from shared.turns.accept import find_session, list_messages

router = APIRouter(prefix="/v1", tags=["sessions"])


@router.get("/sessions/{session_key}", response_model=SessionOut, responses={404: {"description": "No such session"}})
def session_state(
    session_key: SessionKey,
    tenant: ChatKey,
    user_id: Annotated[str, Query(pattern=ID_PATTERN, description="The session's user")],
) -> SessionOut:
    """Summary, active task, compaction count, watermarks and LLM calls by purpose."""
    with db.connection() as conn:
        session = find_session(conn, tenant.id, user_id, session_key)
        if session is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {user_id!r} has no session {session_key!r}")
        calls = calls_by_purpose(conn, session_id=session["id"])
    return SessionOut(
        session_id=session["id"],
        user_id=user_id,
        llm_calls=calls,
        **{k: v for k, v in session.items() if k in SessionOut.model_fields and k not in ("session_id", "user_id")},
    )


@router.get("/sessions/{session_key}/context")
def session_context(
    session_key: SessionKey,
    tenant: ChatKey,
    user_id: Annotated[str, Query(pattern=ID_PATTERN, description="The session's user")],
) -> dict[str, Any]:
    """What the model would see on the next request: every section with its token count, the steering
    that would fire and why, and the pruning applied. For a session that does not exist yet
    (`session_exists: false`), what its first request would contain before the user's message."""
    with db.connection() as conn:
        return inspect_session(
            conn, get_settings(), tenant_id=tenant.id, user_external_id=user_id, session_key=session_key
        )


@router.get(
    "/sessions/{session_key}/messages", response_model=MessagesOut, responses={404: {"description": "No such session"}}
)
def session_messages(
    session_key: SessionKey,
    tenant: ChatKey,
    user_id: Annotated[str, Query(pattern=ID_PATTERN, description="The session's user")],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MessagesOut:
    with db.connection() as conn:
        rows = list_messages(conn, tenant.id, user_id, session_key, limit)
    if rows is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {user_id!r} has no session {session_key!r}")
    return MessagesOut(session_key=session_key, user_id=user_id, messages=[MessageOut(**row) for row in rows])
