"""A Python client for engram's memory API: ingest a conversation, wait for its memories, get a context
block for a prompt, search and manage memories. Sync (`EngramClient`) and async (`AsyncEngramClient`),
same methods, results typed with the gateway's own response models (`api.schemas`).

    from engram.client import EngramClient

    with EngramClient("http://127.0.0.1:8000", api_key) as engram:
        engram.ingest("alice", "chat-1", [{"role": "user", "content": "I live in Lisbon."}])
        engram.wait_until_idle("alice", "chat-1")
        print(engram.context("alice", query="Where do I live?", max_tokens=500).context)

`base_url` and `api_key` default to ENGRAM_URL and ENGRAM_API_KEY. Errors raise `EngramAPIError` with
the HTTP status, engram's stable `code` and its `detail`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import httpx

from api.schemas.context import ContextOut
from api.schemas.ingest import IngestAccepted, MemoryStatusOut
from api.schemas.memories import MemoryOut, MemoryWriteOut, SearchResultOut

DEFAULT_URL = "http://127.0.0.1:8000"
T = TypeVar("T")
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
class _Call(Generic[T]):
    """One request and how to read its answer: built once, sent by the sync or the async client."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _error(response: httpx.Response) -> EngramAPIError:
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


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise _error(response)
    return response


def _none(response: httpx.Response) -> None:
    _check(response)


def _json(response: httpx.Response) -> Any:
    return _check(response).json()


def _model(model: type[Any]) -> Callable[[httpx.Response], Any]:
    return lambda response: model.model_validate(_json(response))


def _models(model: type[Any]) -> Callable[[httpx.Response], list[Any]]:
    return lambda response: [model.model_validate(item) for item in _json(response)]


def _ingested(response: httpx.Response) -> Ingested:
    body = IngestAccepted.model_validate(_json(response))
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    return Ingested(body.session_id, body.message_ids, body.new_messages, body.status, replayed)


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _iso(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


class _Requests:
    """The API's operations as `_Call`s; the two clients only differ in how they send them."""

    @staticmethod
    def ingest(
        user_id: str,
        session_key: str,
        messages: Sequence[Message],
        metadata: Mapping[str, Any] | None,
        idempotency_key: str | None,
    ) -> _Call[Ingested]:
        body: dict[str, Any] = {
            "messages": [_drop_none({**m, "created_at": _iso(m.get("created_at"))}) for m in messages]
        }
        if metadata is not None:
            body["metadata"] = dict(metadata)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return _Call("POST", f"/v1/users/{user_id}/sessions/{session_key}/messages", _ingested, body, None, headers)

    @staticmethod
    def memory_status(user_id: str, session_key: str) -> _Call[MemoryStatusOut]:
        return _Call("GET", f"/v1/users/{user_id}/sessions/{session_key}/memory-status", _model(MemoryStatusOut))

    @staticmethod
    def context(
        user_id: str, query: str | None, session_key: str | None, max_tokens: int, sections: Sequence[str] | None
    ) -> _Call[ContextOut]:
        body = _drop_none(
            {
                "query": query,
                "session_key": session_key,
                "max_tokens": max_tokens,
                "sections": list(sections) if sections is not None else None,
            }
        )
        return _Call("POST", f"/v1/users/{user_id}/context", _model(ContextOut), body)

    @staticmethod
    def search(
        user_id: str, query: str, limit: int, filters: Mapping[str, Any] | None, mode: str | None
    ) -> _Call[list[SearchResultOut]]:
        body = _drop_none({"query": query, "limit": limit, "filters": dict(filters) if filters else None, "mode": mode})
        return _Call(
            "POST",
            f"/v1/users/{user_id}/memories/search",
            lambda r: [SearchResultOut.model_validate(item) for item in _json(r)["results"]],
            body,
        )

    @staticmethod
    def add_memory(user_id: str, fields: Mapping[str, Any]) -> _Call[MemoryWriteOut]:
        body = _drop_none({**fields, "event_time": _iso(fields.get("event_time"))})
        return _Call("POST", f"/v1/users/{user_id}/memories", _model(MemoryWriteOut), body)

    @staticmethod
    def memories(user_id: str, params: Mapping[str, Any]) -> _Call[list[MemoryOut]]:
        return _Call("GET", f"/v1/users/{user_id}/memories", _models(MemoryOut), params=_drop_none(params))

    @staticmethod
    def get_memory(user_id: str, memory_id: int) -> _Call[MemoryOut]:
        return _Call("GET", f"/v1/users/{user_id}/memories/{memory_id}", _model(MemoryOut))

    @staticmethod
    def update_memory(user_id: str, memory_id: int, fields: Mapping[str, Any]) -> _Call[MemoryWriteOut]:
        body = _drop_none({**fields, "event_time": _iso(fields.get("event_time"))})
        return _Call("PATCH", f"/v1/users/{user_id}/memories/{memory_id}", _model(MemoryWriteOut), body)

    @staticmethod
    def delete_memory(user_id: str, memory_id: int) -> _Call[None]:
        return _Call("DELETE", f"/v1/users/{user_id}/memories/{memory_id}", _none)

    @staticmethod
    def export(user_id: str) -> _Call[dict[str, Any]]:
        return _Call("GET", f"/v1/users/{user_id}/export", _json)


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    url = (base_url or os.environ.get("ENGRAM_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("ENGRAM_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key or set ENGRAM_API_KEY")
    return url, {"Authorization": f"Bearer {key}"}


class EngramClient:
    """Synchronous client. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url, headers = _settings(base_url, api_key)
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, call: _Call[T]) -> T:
        response = self.http.request(
            call.method, call.path, json=call.json, params=call.params, headers=dict(call.headers)
        )
        return call.parse(response)

    # --- conversations ----------------------------------------------------------------------

    def ingest(
        self,
        user_id: str,
        session_key: str,
        messages: Sequence[Message],
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Ingested:
        """Store messages of a conversation engram does not run (in order); extraction follows."""
        return self._send(_Requests.ingest(user_id, session_key, messages, metadata, idempotency_key))

    def memory_status(self, user_id: str, session_key: str) -> MemoryStatusOut:
        return self._send(_Requests.memory_status(user_id, session_key))

    def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        """Poll memory-status until every message is mined and every memory embedded (TimeoutError after
        `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.memory_status(user_id, session_key)
            if status.idle:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"session {session_key!r} not idle after {timeout} s: {status.pending_messages} pending"
                )
            time.sleep(interval)

    def context(
        self,
        user_id: str,
        *,
        query: str | None = None,
        session_key: str | None = None,
        max_tokens: int = 1000,
        sections: Sequence[str] | None = None,
    ) -> ContextOut:
        """A fenced context block for your prompt, at most `max_tokens` tokens."""
        return self._send(_Requests.context(user_id, query, session_key, max_tokens, sections))

    # --- memories ---------------------------------------------------------------------------

    def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> list[SearchResultOut]:
        return self._send(_Requests.search(user_id, query, limit, filters, mode))

    def add_memory(self, user_id: str, key: str, value: str, **fields: Any) -> MemoryWriteOut:
        """Fields: namespace, kind, tags, confidence, event_time (see MemoryIn)."""
        return self._send(_Requests.add_memory(user_id, {"key": key, "value": value, **fields}))

    def memories(self, user_id: str, **params: Any) -> list[MemoryOut]:
        """Params: namespace (prefix), kind, tag, include_superseded, limit, offset."""
        return self._send(_Requests.memories(user_id, params))

    def get_memory(self, user_id: str, memory_id: int) -> MemoryOut:
        return self._send(_Requests.get_memory(user_id, memory_id))

    def update_memory(self, user_id: str, memory_id: int, **fields: Any) -> MemoryWriteOut:
        """Fields: value (a new value supersedes), tags, confidence, decay_rate, event_time."""
        return self._send(_Requests.update_memory(user_id, memory_id, fields))

    def delete_memory(self, user_id: str, memory_id: int) -> None:
        self._send(_Requests.delete_memory(user_id, memory_id))

    def export(self, user_id: str) -> dict[str, Any]:
        """Everything engram holds about the user (the shape `engram import` reads back)."""
        return self._send(_Requests.export(user_id))


class AsyncEngramClient:
    """The same operations for asyncio. Use as an async context manager, or await `aclose()`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, headers = _settings(base_url, api_key)
        self.http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        response = await self.http.request(
            call.method, call.path, json=call.json, params=call.params, headers=dict(call.headers)
        )
        return call.parse(response)

    async def ingest(
        self,
        user_id: str,
        session_key: str,
        messages: Sequence[Message],
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Ingested:
        return await self._send(_Requests.ingest(user_id, session_key, messages, metadata, idempotency_key))

    async def memory_status(self, user_id: str, session_key: str) -> MemoryStatusOut:
        return await self._send(_Requests.memory_status(user_id, session_key))

    async def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        deadline = time.monotonic() + timeout
        while True:
            status = await self.memory_status(user_id, session_key)
            if status.idle:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"session {session_key!r} not idle after {timeout} s: {status.pending_messages} pending"
                )
            await asyncio.sleep(interval)

    async def context(
        self,
        user_id: str,
        *,
        query: str | None = None,
        session_key: str | None = None,
        max_tokens: int = 1000,
        sections: Sequence[str] | None = None,
    ) -> ContextOut:
        return await self._send(_Requests.context(user_id, query, session_key, max_tokens, sections))

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> list[SearchResultOut]:
        return await self._send(_Requests.search(user_id, query, limit, filters, mode))

    async def add_memory(self, user_id: str, key: str, value: str, **fields: Any) -> MemoryWriteOut:
        return await self._send(_Requests.add_memory(user_id, {"key": key, "value": value, **fields}))

    async def memories(self, user_id: str, **params: Any) -> list[MemoryOut]:
        return await self._send(_Requests.memories(user_id, params))

    async def get_memory(self, user_id: str, memory_id: int) -> MemoryOut:
        return await self._send(_Requests.get_memory(user_id, memory_id))

    async def update_memory(self, user_id: str, memory_id: int, **fields: Any) -> MemoryWriteOut:
        return await self._send(_Requests.update_memory(user_id, memory_id, fields))

    async def delete_memory(self, user_id: str, memory_id: int) -> None:
        await self._send(_Requests.delete_memory(user_id, memory_id))

    async def export(self, user_id: str) -> dict[str, Any]:
        return await self._send(_Requests.export(user_id))
