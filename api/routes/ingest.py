"""Message ingest for conversations engram does not run, and how far the memory pipeline has got."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Path, Response, status

from api.deps import MemoryReadKey, MemoryWriteKey
from api.errors import refuse_over_budget
from api.schemas.common import ID_PATTERN
from api.schemas.ingest import IngestAccepted, IngestIn, MemoryStatusOut
from shared.infra import db
from shared.infra.config import get_settings
from shared.pipeline.status import session_memory_status
from shared.queueing.dispatch import get_dispatcher
from shared.turns.accept import IdempotencyConflict
from shared.turns.ingest import IngestMessage, ingest_messages

router = APIRouter(prefix="/v1/users/{user_id}/sessions/{session_key}", tags=["ingest"])

UserId = Annotated[str, Path(pattern=ID_PATTERN, description="Your id for the user")]
SessionKey = Annotated[str, Path(pattern=ID_PATTERN, description="Your key for the conversation")]


def _check_bounds(body: IngestIn) -> None:
    settings = get_settings()
    if len(body.messages) > settings.ingest_max_messages:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"{len(body.messages)} messages; the limit is {settings.ingest_max_messages} per request "
            "(ENGRAM_INGEST_MAX_MESSAGES): send them in several requests",
        )
    for index, message in enumerate(body.messages):
        if len(message.content) > settings.ingest_max_message_chars:
            raise HTTPException(
                status.HTTP_413_CONTENT_TOO_LARGE,
                f"message {index} is {len(message.content)} characters; the limit is "
                f"{settings.ingest_max_message_chars} (ENGRAM_INGEST_MAX_MESSAGE_CHARS); nothing was written",
            )


@router.post(
    "/messages",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestAccepted,
    responses={
        409: {"description": "Idempotency-Key (or a message's idempotency_key) reused for something else"},
        413: {"description": "More messages than ENGRAM_INGEST_MAX_MESSAGES, or one longer than the limit"},
        429: {"description": "The tenant's monthly token budget is used up (token_budget_exceeded)"},
        503: {"description": "Database unavailable; nothing was written"},
    },
)
def post_messages(
    user_id: UserId,
    session_key: SessionKey,
    body: IngestIn,
    tenant: MemoryWriteKey,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="Repeat a request safely: the same key answers the same message ids"),
    ] = None,
) -> IngestAccepted:
    """Store messages of a conversation engram does not run, in order, at the end of the session (no
    reply is generated); extraction, flush, compaction and transcript indexing follow as after a chat turn.
    One invalid message refuses the whole batch."""
    _check_bounds(body)
    messages = [IngestMessage(m.role, m.content, m.created_at, m.name, m.idempotency_key) for m in body.messages]
    try:
        with db.connection() as conn:
            refuse_over_budget(conn, tenant.id)
            result = ingest_messages(
                conn,
                tenant_id=tenant.id,
                user_external_id=user_id,
                session_key=session_key,
                messages=messages,
                metadata=body.metadata,
                idempotency_key=idempotency_key,
            )
    except IdempotencyConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    if result.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    elif result.written:
        get_dispatcher().schedule_memory_work(result.session_id)
    return IngestAccepted(
        session_id=result.session_id, message_ids=result.message_ids, new_messages=result.written, status="queued"
    )


@router.get("/memory-status", response_model=MemoryStatusOut, responses={404: {"description": "No such session"}})
def memory_status(user_id: UserId, session_key: SessionKey, tenant: MemoryReadKey) -> MemoryStatusOut:
    """Messages not mined yet, the last extraction and the memories made from this session: poll this
    until `idle` instead of sleeping."""
    with db.connection() as conn:
        found = session_memory_status(conn, tenant.id, user_id, session_key)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {user_id!r} has no session {session_key!r}")
    return MemoryStatusOut(**found)
