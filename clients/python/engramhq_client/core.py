"""What the sync and the async client share: every operation as a `Call` (method, path, body, headers and
how to read the answer), built here once with the parameters and documentation the clients' methods have (the
clients take their methods from here, client.py); the clients differ only in how they send a call and wait."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

from engramhq_client.models import (
    ContextOut,
    IngestAccepted,
    MemoryDetailOut,
    MemoryOut,
    MemoryStatusOut,
    MemoryWriteOut,
    SearchOut,
    SearchResultOut,
)

DEFAULT_URL = "http://127.0.0.1:8000"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Message = Mapping[str, Any]  # {"role", "content", "created_at"?, "name"?, "idempotency_key"?}


class EngramAPIError(RuntimeError):
    """The gateway refused a request: `status_code`, `code` (e.g. validation_error, not_found) and `detail`."""

    def __init__(self, status_code: int, code: str, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(f"{status_code} {code}: {detail}")
        self.status_code = status_code
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


@dataclass(frozen=True)
class Ingested:
    """What `ingest` stored: the session, one id per message sent, and whether this was a replay."""

    session_id: int
    message_ids: list[int]
    new_messages: int
    status: str
    replayed: bool = False


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def request_args(call: Call[Any]) -> dict[str, Any]:
    """The call as the arguments of httpx's `request`, the same for its sync and async clients."""
    return {
        "method": call.method,
        "url": call.path,
        "json": call.json,
        "params": call.params,
        "headers": dict(call.headers),
    }


def error(response: httpx.Response) -> EngramAPIError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    retry = response.headers.get("Retry-After")
    return EngramAPIError(
        response.status_code,
        str(body.get("code") or "http_error"),
        body.get("detail", response.text),
        float(retry) if retry and retry.replace(".", "", 1).isdigit() else None,
    )


def checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error(response)
    return response


def _none(response: httpx.Response) -> None:
    checked(response)


def _json(response: httpx.Response) -> Any:
    return checked(response).json()


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate(_json(response))


def _models(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    return lambda response: [model.model_validate(item) for item in _json(response)]


def _search_results(response: httpx.Response) -> list[SearchResultOut]:
    return SearchOut.model_validate(_json(response)).results


def _ingested(response: httpx.Response) -> Ingested:
    body = IngestAccepted.model_validate(_json(response))
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    return Ingested(body.session_id, body.message_ids, body.new_messages, body.status, replayed)


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _iso(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def ingest(
    user_id: str,
    session_key: str,
    messages: Sequence[Message],
    *,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[Ingested]:
    """Store messages of a conversation engram does not run (in order); extraction follows."""
    body: dict[str, Any] = {"messages": [_drop_none({**m, "created_at": _iso(m.get("created_at"))}) for m in messages]}
    if metadata is not None:
        body["metadata"] = dict(metadata)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call("POST", f"/v1/users/{user_id}/sessions/{session_key}/messages", _ingested, body, None, headers)


def memory_status(user_id: str, session_key: str) -> Call[MemoryStatusOut]:
    return Call("GET", f"/v1/users/{user_id}/sessions/{session_key}/memory-status", _model(MemoryStatusOut))


def context(
    user_id: str,
    *,
    query: str | None = None,
    session_key: str | None = None,
    max_tokens: int = 1000,
    sections: Sequence[str] | None = None,
) -> Call[ContextOut]:
    """A fenced context block for your prompt, at most `max_tokens` tokens."""
    body = _drop_none(
        {
            "query": query,
            "session_key": session_key,
            "max_tokens": max_tokens,
            "sections": list(sections) if sections is not None else None,
        }
    )
    return Call("POST", f"/v1/users/{user_id}/context", _model(ContextOut), body)


def search(
    user_id: str, query: str, *, limit: int = 10, filters: Mapping[str, Any] | None = None, mode: str | None = None
) -> Call[list[SearchResultOut]]:
    body = _drop_none({"query": query, "limit": limit, "filters": dict(filters) if filters else None, "mode": mode})
    return Call("POST", f"/v1/users/{user_id}/memories/search", _search_results, body)


def add_memory(user_id: str, key: str, value: str, **fields: Any) -> Call[MemoryWriteOut]:
    """Fields: namespace, kind, tags, confidence, event_time (see MemoryIn)."""
    body = _drop_none({"key": key, "value": value, **fields, "event_time": _iso(fields.get("event_time"))})
    return Call("POST", f"/v1/users/{user_id}/memories", _model(MemoryWriteOut), body)


def memories(user_id: str, **params: Any) -> Call[list[MemoryOut]]:
    """Params: namespace (prefix), kind, tag, include_superseded, limit, offset."""
    return Call("GET", f"/v1/users/{user_id}/memories", _models(MemoryOut), params=_drop_none(params))


def get_memory(user_id: str, memory_id: int) -> Call[MemoryDetailOut]:
    """The memory and the messages it was learned from."""
    return Call("GET", f"/v1/users/{user_id}/memories/{memory_id}", _model(MemoryDetailOut))


def update_memory(user_id: str, memory_id: int, **fields: Any) -> Call[MemoryWriteOut]:
    """Fields: value (a new value supersedes), tags, confidence, decay_rate, event_time."""
    body = _drop_none({**fields, "event_time": _iso(fields.get("event_time"))})
    return Call("PATCH", f"/v1/users/{user_id}/memories/{memory_id}", _model(MemoryWriteOut), body)


def delete_memory(user_id: str, memory_id: int) -> Call[None]:
    return Call("DELETE", f"/v1/users/{user_id}/memories/{memory_id}", _none)


def export(user_id: str) -> Call[dict[str, Any]]:
    """Everything engram holds about the user (the shape `engram import` reads back)."""
    return Call("GET", f"/v1/users/{user_id}/export", _json)


def connection(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The gateway's URL and the auth header, from the arguments or ENGRAM_URL / ENGRAM_API_KEY."""
    url = (base_url or os.environ.get("ENGRAM_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("ENGRAM_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key or set ENGRAM_API_KEY")
    return url, {"Authorization": f"Bearer {key}"}


@dataclass
class IdleWait:
    """`wait_until_idle`'s bookkeeping: whether a status ends the wait, or the time is up (TimeoutError)."""

    session_key: str
    timeout: float
    deadline: float = 0.0

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout

    def done(self, status: MemoryStatusOut) -> bool:
        if status.idle:
            return True
        if time.monotonic() >= self.deadline:
            raise TimeoutError(
                f"session {self.session_key!r} not idle after {self.timeout} s: {status.pending_messages} pending"
            )
        return False
