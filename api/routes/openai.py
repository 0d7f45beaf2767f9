"""OpenAI-compatible chat completions: `POST /v1/chat/completions` and `GET /v1/models`.

A request becomes a turn through `submit_turn`, like a REST turn; the answer is built from that turn
(streamed from its event stream as `chat.completion.chunk`s). Errors here have OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`, with the status codes the SDK expects, so its
retries do the right thing (and `x-should-retry: false` where a retry cannot help).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from api.deps import ChatKey, check_user
from api.errors import ApiError, code_for, explain_content_type, refuse_over_budget
from api.schemas.common import ID_PATTERN
from api.schemas.openai import ChatCompletionIn, ModelOut, ModelsOut, OpenAIErrorOut
from shared.access.auth import Principal
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.events import TERMINAL_EVENTS, follow_events
from shared.infra.logging import get_logger
from shared.infra.redis_client import shared_async_redis
from shared.llm.factory import chat_model
from shared.llm.types import ToolSpec
from shared.queueing.dispatch import get_dispatcher
from shared.tools import default_registry
from shared.turns.accept import IdempotencyConflict, submit_turn
from shared.turns.client_options import ClientOptions
from shared.turns.openai_compat import (
    Completion,
    CompletionPlan,
    CompletionRefused,
    check_tool_results,
    default_session_key,
    load_completion,
    openai_tool_call,
    openai_usage,
)

log = get_logger(__name__)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_ID = re.compile(ID_PATTERN)


def openai_error(
    status_code: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    retry: bool | None = None,
) -> JSONResponse:
    kind = _ERROR_TYPES.get(status_code, "server_error" if status_code >= 500 else "invalid_request_error")
    if code == "token_budget_exceeded":
        kind = "insufficient_quota"
    out_headers = dict(headers or {})
    if retry is not None:
        out_headers["x-should-retry"] = "true" if retry else "false"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code or code_for(status_code)}}
    return JSONResponse(body, status_code=status_code, headers=out_headers)


class OpenAIRoute(APIRoute):
    """Errors of these routes (authentication, validation, refusals) in OpenAI's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return _invalid(request, exc)
            except HTTPException as exc:
                code = getattr(exc, "code", None)
                # A spent budget and an Idempotency-Key conflict do not heal by retrying.
                retry = False if code == "token_budget_exceeded" or exc.status_code == 409 else None
                return openai_error(
                    exc.status_code,
                    str(exc.detail),
                    code=code,
                    param=getattr(exc, "param", None),
                    headers=dict(exc.headers or {}),
                    retry=retry,
                )
            except db.DatabaseUnavailable:
                return openai_error(
                    503, "database unavailable; nothing was written, retry later", code="database_unavailable"
                )

        return handle


def _refused(exc: CompletionRefused) -> ApiError:
    error = ApiError(exc.status, str(exc), code=exc.code)
    error.param = exc.param  # type: ignore[attr-defined]  # read by OpenAIRoute
    return error


def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = explain_content_type(request, list(exc.errors()))
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    where = ".".join(loc)
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else str(first.get("msg", "invalid request"))
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s))"
    return openai_error(400, message, code="validation_error", param=where or None)


router = APIRouter(prefix="/v1", tags=["openai-compatible"], route_class=OpenAIRoute)
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": OpenAIErrorOut, "description": text}
    for code, text in {
        400: "Invalid request (OpenAI's error shape)",
        401: "Missing or invalid API key",
        403: "The key lacks the chat scope, or is bound to another user",
        409: "Idempotency-Key reused for a different request",
        413: "Too many messages, or a new message longer than ENGRAM_MAX_TURN_CHARS",
        429: "Rate limit, or the monthly token budget is spent (insufficient_quota)",
        500: "The turn failed",
        504: "The turn did not finish within ENGRAM_CHAT_COMPLETIONS_WAIT_SECONDS (a retry joins it)",
    }.items()
}


@router.get("/models", response_model=ModelsOut, responses=ERRORS)
def list_models(_principal: ChatKey) -> ModelsOut:
    """Any model name is accepted (it names the default session); these are the ones engram suggests."""
    return ModelsOut(data=[ModelOut(id="engram", created=0), ModelOut(id=chat_model(get_settings()), created=0)])


@router.post(
    "/chat/completions",
    responses={200: {"description": "A chat.completion, or with stream=true a text/event-stream of chunks"}, **ERRORS},
)
async def chat_completions(
    body: ChatCompletionIn,
    principal: ChatKey,
    x_engram_session: Annotated[
        str | None, Header(description="Session key (default: one per user and model, openai-<model>)")
    ] = None,
    idempotency_key: Annotated[
        str | None, Header(max_length=200, description="Repeat a request safely: the same key returns the same turn")
    ] = None,
) -> Response:
    user = body.user or principal.user_external_id
    if user is None:
        raise ApiError(400, "user is required: the engram user this conversation belongs to", code="missing_user")
    check_user(principal, user)
    session_key = x_engram_session or default_session_key(body.model)
    if not _ID.match(session_key):
        raise ApiError(400, f"X-Engram-Session must match {ID_PATTERN}", code="validation_error")
    plan = _plan(body)
    fingerprint = body.model_dump_json(exclude={"stream", "stream_options"})
    submitted = await asyncio.to_thread(_submit, principal, session_key, user, plan, fingerprint, idempotency_key)
    turn = submitted.turn
    if not submitted.replayed:
        get_dispatcher().drain_soon(turn["session_id"], principal.id)
    headers = {"X-Engram-Turn-Id": str(turn["turn_id"]), "X-Engram-Session": session_key}
    head = {
        "id": f"chatcmpl-engram-{turn['turn_id']}",
        "created": int(turn["created_at"].timestamp()),
        "model": body.model,
    }
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _stream(principal, turn["turn_id"], head, include_usage),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache"},
        )
    completion = await _wait(principal, turn["turn_id"])
    if completion.status == "failed":
        return openai_error(500, f"the turn failed: {completion.error}", code="turn_failed", headers=headers)
    if completion.status != "done":
        return openai_error(
            504, "the turn is still running; retry the same request to wait for it", code="timeout", headers=headers
        )
    return JSONResponse(_completion_json(head, completion), headers=headers)


def _plan(body: ChatCompletionIn) -> CompletionPlan:
    settings = get_settings()
    if len(body.messages) > settings.chat_completions_max_messages:
        raise ApiError(
            413,
            f"{len(body.messages)} messages; the limit is {settings.chat_completions_max_messages} "
            "(ENGRAM_CHAT_COMPLETIONS_MAX_MESSAGES)",
        )
    try:
        instructions = [m.text(i) for i, m in enumerate(body.messages) if m.role in ("system", "developer")]
        sent = [m.to_client(i) for i, m in enumerate(body.messages) if m.role not in ("system", "developer")]
        if not sent:
            raise CompletionRefused("messages holds no user message", "messages")
        check_tool_results(sent)
    except CompletionRefused as exc:
        raise _refused(exc) from exc
    own = set(default_registry().tools)
    tools = tuple(ToolSpec(t.function.name, t.function.description, t.function.parameters) for t in body.tools or ())
    taken = sorted(own.intersection(t.name for t in tools))
    if taken:
        raise ApiError(400, f"tool names taken by engram's own tools: {', '.join(taken)}", code="tool_name_taken")
    options = ClientOptions(
        tools=tools,
        instructions="\n\n".join(text for text in instructions if text.strip()),
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        model=body.model,
    )
    return CompletionPlan(sent, options, max_chars=settings.max_turn_chars)


def _submit(
    principal: Principal,
    session_key: str,
    user: str,
    plan: CompletionPlan,
    fingerprint: str,
    idempotency_key: str | None,
) -> Any:
    try:
        with db.connection() as conn:
            refuse_over_budget(conn, principal.id)
            return submit_turn(
                conn,
                tenant_id=principal.id,
                session_key=session_key,
                user_external_id=user,
                plan=plan,
                fingerprint=fingerprint,
                idempotency_key=idempotency_key,
            )
    except CompletionRefused as exc:
        raise _refused(exc) from exc
    except IdempotencyConflict as exc:
        raise ApiError(409, str(exc)) from exc


def _load(principal: Principal, turn_id: int) -> Completion:
    with db.connection() as conn:
        completion = load_completion(conn, principal.id, turn_id)
    assert completion is not None  # the request created or joined it
    return completion


async def _wait(principal: Principal, turn_id: int) -> Completion:
    deadline = time.monotonic() + get_settings().chat_completions_wait_seconds
    completion = await asyncio.to_thread(_load, principal, turn_id)
    if completion.status in ("done", "failed"):
        return completion
    async for _entry, event, _data in follow_events(shared_async_redis(), turn_id, deadline):
        if event in TERMINAL_EVENTS or event == "idle":
            completion = await asyncio.to_thread(_load, principal, turn_id)
            if completion.status in ("done", "failed"):
                break
    return completion


def _completion_json(head: dict[str, Any], completion: Completion) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.reply}
    if completion.tool_calls:
        message["tool_calls"] = [openai_tool_call(call) for call in completion.tool_calls]
    return {
        **head,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": completion.finish_reason, "logprobs": None}],
        "usage": openai_usage(completion.usage),
    }


def _sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def _error_event(message: str, code: str) -> str:
    return _sse({"error": {"message": message, "type": "server_error", "param": None, "code": code}})


async def _stream(principal: Principal, turn_id: int, head: dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        out: dict[str, Any] = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if include_usage:
            out["usage"] = None
        return _sse(out)

    yield chunk({"role": "assistant", "content": ""})
    sent = ""  # reply text already streamed
    attempt = ""  # text of the current attempt (a worker that died makes the turn start over: "reset")
    calls_sent: list[str] = []
    deadline = time.monotonic() + get_settings().chat_completions_wait_seconds
    async for _entry, event, data in follow_events(shared_async_redis(), turn_id, deadline):
        if event == "delta":
            attempt += str(data.get("text", ""))
            piece = _beyond(sent, attempt)
            if piece is None:
                yield _error_event(
                    "the reply was generated again after a worker failure and differs from what was "
                    "streamed; send the request again to read it",
                    "reply_regenerated",
                )
                return
            if piece:
                sent += piece
                yield chunk({"content": piece})
        elif event == "reset":
            attempt = ""
        elif event == "tool_call" and data.get("client") and data.get("id") not in calls_sent:
            calls_sent.append(str(data["id"]))
            yield chunk({"tool_calls": [openai_tool_call(data, len(calls_sent) - 1)]})
        elif event in TERMINAL_EVENTS or event == "idle":
            completion = await asyncio.to_thread(_load, principal, turn_id)
            if completion.status == "failed":
                yield _error_event(f"the turn failed: {completion.error}", "turn_failed")
                return
            if completion.status != "done":
                continue
            # The row is the truth: send what the stream did not carry (e.g. it expired).
            rest = _beyond(sent, completion.reply)
            if rest:
                yield chunk({"content": rest})
            for call in completion.tool_calls:
                if call.id not in calls_sent:
                    calls_sent.append(call.id)
                    yield chunk({"tool_calls": [openai_tool_call(call, len(calls_sent) - 1)]})
            yield chunk({}, completion.finish_reason)
            if include_usage:
                yield _sse(
                    {**head, "object": "chat.completion.chunk", "choices": [], "usage": openai_usage(completion.usage)}
                )
            yield _sse("[DONE]")
            return
    yield _error_event("the turn is still running; send the same request again to wait for it", "timeout")


def _beyond(sent: str, text: str) -> str | None:
    """What `text` adds to the already streamed `sent`; None when it does not continue it."""
    if text.startswith(sent):
        return text[len(sent) :]
    return "" if sent.startswith(text) else None
