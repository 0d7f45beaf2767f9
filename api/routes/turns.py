"""Submitting turns and following them: status, long poll, live event stream."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, HTTPException, Path, Query, Response, status
from sse_starlette.sse import EventSourceResponse

from api.deps import ChatKey, check_user
from api.errors import refuse_over_budget
from api.schemas.common import ID_PATTERN
from api.schemas.turns import TurnAccepted, TurnIn, TurnOut
from shared.access.auth import Principal
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.events import TERMINAL_EVENTS
from shared.infra.events import follow_events as _events_until
from shared.infra.logging import get_logger
from shared.infra.redis_client import shared_async_redis
from shared.llm.ledger import calls_by_purpose
from shared.queueing.dispatch import get_dispatcher
from shared.turns.accept import TERMINAL_STATUSES, IdempotencyConflict, get_turn, submit_turn
from shared.turns.rows import TurnView

router = APIRouter(prefix="/v1", tags=["turns"])
log = get_logger(__name__)

SessionKey = Annotated[str, Path(pattern=ID_PATTERN, description="Your key for the conversation")]


@router.post(
    "/sessions/{session_key}/turns",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TurnAccepted,
    responses={
        401: {"description": "Missing or invalid API key"},
        409: {"description": "Idempotency-Key reused for a different request"},
        413: {"description": "Text longer than ENGRAM_MAX_TURN_CHARS"},
        503: {"description": "Database unavailable; nothing was written"},
    },
)
def post_turn(
    session_key: SessionKey,
    body: TurnIn,
    tenant: ChatKey,
    response: Response,
    idempotency_key: Annotated[
        str | None, Header(max_length=200, description="Repeat a request safely: the same key returns the same turn")
    ] = None,
) -> TurnAccepted:
    check_user(tenant, body.user_id)
    settings = get_settings()
    if len(body.text) > settings.max_turn_chars:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"text is {len(body.text)} characters; the limit is {settings.max_turn_chars} (ENGRAM_MAX_TURN_CHARS)",
        )
    try:
        # Autocommit: the budget check is one statement and so is the turn (submit_turn), neither needing
        # BEGIN and COMMIT round trips; submit_turn opens a transaction of its own when it must go step by step.
        with db.connection(autocommit=True) as conn:
            refuse_over_budget(conn, tenant.id)
            submitted = submit_turn(
                conn,
                tenant_id=tenant.id,
                session_key=session_key,
                user_external_id=body.user_id,
                text=body.text,
                name=body.name,
                idempotency_key=idempotency_key,
            )
    except IdempotencyConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    turn = submitted.turn
    log.info("turn accepted", turn_id=turn["turn_id"], session_id=turn["session_id"], replayed=submitted.replayed)
    if submitted.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    # A replay of a turn still queued is sent on too: the first request may have stored it and then not
    # reached the broker (a stalled Redis, answered `dependency_timeout`), which would leave it to the sweep.
    # A drain is idempotent; a second one costs a look.
    if not submitted.replayed or turn["status"] == "queued":
        get_dispatcher().drain_soon(turn["session_id"], tenant.id)
    return TurnAccepted(turn_id=turn["turn_id"], session_id=turn["session_id"], status=turn["status"])


class _LoadedTurn(TurnView):
    """A turn as GET /turns/{id} answers it: with its model calls by purpose (calls_by_purpose)."""

    llm_calls: dict[str, Any]


def _load_turn(principal: Principal, turn_id: int) -> _LoadedTurn:
    with db.connection() as conn:
        turn = get_turn(conn, principal.id, turn_id)
        # Another user's turn is as invisible to a user-bound key as another tenant's is to any key.
        if turn is None or not principal.may_act_for(turn["user_id"]):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no turn {turn_id}")
        loaded = cast(_LoadedTurn, turn)
        loaded["llm_calls"] = calls_by_purpose(conn, turn_id=turn_id)
    return loaded


@router.get("/turns/{turn_id}", response_model=TurnOut, responses={404: {"description": "No such turn"}})
async def read_turn(
    turn_id: int,
    tenant: ChatKey,
    wait: Annotated[float, Query(ge=0, description="Seconds to wait for the turn to finish (long poll)")] = 0,
) -> TurnOut:
    deadline = time.monotonic() + min(wait, get_settings().max_wait_seconds)
    turn = await asyncio.to_thread(_load_turn, tenant, turn_id)
    if turn["status"] in TERMINAL_STATUSES or wait <= 0:
        return TurnOut(**turn)
    # Wake on the turn's own events; re-read the row (the truth) after each wake-up or second.
    async for _entry, event, _data in _events_until(shared_async_redis(), turn_id, deadline):
        if event in TERMINAL_EVENTS or event == "idle":
            turn = await asyncio.to_thread(_load_turn, tenant, turn_id)
            if turn["status"] in TERMINAL_STATUSES:
                break
    return TurnOut(**turn)


@router.get(
    "/turns/{turn_id}/events",
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "Server-Sent Events: delta, tool_call, tool_result, reset, then done or error. The "
            "stream ends after done or error, or after ENGRAM_SSE_MAX_SECONDS; reconnect with Last-Event-ID to go on.",
        },
        404: {"description": "No such turn"},
    },
)
async def turn_events(
    turn_id: int,
    tenant: ChatKey,
    last_event_id: Annotated[str | None, Header(description="Resume after this event id")] = None,
) -> EventSourceResponse:
    turn = await asyncio.to_thread(_load_turn, tenant, turn_id)
    return EventSourceResponse(_sse(tenant, turn, last_event_id or "0"), ping=15)


async def _sse(principal: Principal, turn: TurnView, last_id: str) -> AsyncIterator[dict[str, str]]:
    turn_id = turn["turn_id"]
    # Bounded: a client that never disconnects holds a connection and a pooled Redis connection, so the
    # stream ends after ENGRAM_SSE_MAX_SECONDS; every event carries its id, so EventSource resumes.
    deadline = time.monotonic() + get_settings().sse_max_seconds
    async for entry, event, data in _events_until(shared_async_redis(), turn_id, deadline, last_id):
        if event != "idle":
            yield {"id": entry, "event": event, "data": json.dumps(data)}
            if event in TERMINAL_EVENTS:
                return
            continue
        # Quiet: if the turn finished but its stream is gone (expired, Redis restarted), end from the row.
        turn = await asyncio.to_thread(_load_turn, principal, turn_id)
        if turn["status"] in TERMINAL_STATUSES:
            if turn["status"] == "done":
                yield {
                    "event": "done",
                    "data": json.dumps({"status": "done", "reply": turn["reply"], "usage": turn["usage"]}),
                }
            else:
                yield {"event": "error", "data": json.dumps({"error": turn["error"]})}
            return
