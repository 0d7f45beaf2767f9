"""`EngramClient` (httpx.Client) and `AsyncEngramClient` (httpx.AsyncClient): the same methods, each a
one-line call of the shared request builders in `core`; only sending and sleeping differ."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx

from engramhq_client import core
from engramhq_client.core import Call, IdleWait, Ingested, Message
from engramhq_client.models import (
    ContextOut,
    MemoryDetailOut,
    MemoryOut,
    MemoryStatusOut,
    MemoryWriteOut,
    SearchResultOut,
)

T = TypeVar("T")


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
        url, headers = core.connection(base_url, api_key)
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call[T]) -> T:
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
        return self.send(core.ingest(user_id, session_key, messages, metadata, idempotency_key))

    def memory_status(self, user_id: str, session_key: str) -> MemoryStatusOut:
        return self.send(core.memory_status(user_id, session_key))

    def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        """Poll memory-status until every message is mined and every memory embedded (TimeoutError after
        `timeout` seconds)."""
        wait = IdleWait(session_key, timeout)
        while not wait.done(status := self.memory_status(user_id, session_key)):
            time.sleep(interval)
        return status

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
        return self.send(core.context(user_id, query, session_key, max_tokens, sections))

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
        return self.send(core.search(user_id, query, limit, filters, mode))

    def add_memory(self, user_id: str, key: str, value: str, **fields: Any) -> MemoryWriteOut:
        """Fields: namespace, kind, tags, confidence, event_time (see MemoryIn)."""
        return self.send(core.add_memory(user_id, {"key": key, "value": value, **fields}))

    def memories(self, user_id: str, **params: Any) -> list[MemoryOut]:
        """Params: namespace (prefix), kind, tag, include_superseded, limit, offset."""
        return self.send(core.memories(user_id, params))

    def get_memory(self, user_id: str, memory_id: int) -> MemoryDetailOut:
        """The memory and the messages it was learned from."""
        return self.send(core.get_memory(user_id, memory_id))

    def update_memory(self, user_id: str, memory_id: int, **fields: Any) -> MemoryWriteOut:
        """Fields: value (a new value supersedes), tags, confidence, decay_rate, event_time."""
        return self.send(core.update_memory(user_id, memory_id, fields))

    def delete_memory(self, user_id: str, memory_id: int) -> None:
        self.send(core.delete_memory(user_id, memory_id))

    def export(self, user_id: str) -> dict[str, Any]:
        """Everything engram holds about the user (the shape `engram import` reads back)."""
        return self.send(core.export(user_id))


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
        url, headers = core.connection(base_url, api_key)
        self.http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call[T]) -> T:
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
        return await self.send(core.ingest(user_id, session_key, messages, metadata, idempotency_key))

    async def memory_status(self, user_id: str, session_key: str) -> MemoryStatusOut:
        return await self.send(core.memory_status(user_id, session_key))

    async def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        wait = IdleWait(session_key, timeout)
        while not wait.done(status := await self.memory_status(user_id, session_key)):
            await asyncio.sleep(interval)
        return status

    async def context(
        self,
        user_id: str,
        *,
        query: str | None = None,
        session_key: str | None = None,
        max_tokens: int = 1000,
        sections: Sequence[str] | None = None,
    ) -> ContextOut:
        return await self.send(core.context(user_id, query, session_key, max_tokens, sections))

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        mode: str | None = None,
    ) -> list[SearchResultOut]:
        return await self.send(core.search(user_id, query, limit, filters, mode))

    async def add_memory(self, user_id: str, key: str, value: str, **fields: Any) -> MemoryWriteOut:
        return await self.send(core.add_memory(user_id, {"key": key, "value": value, **fields}))

    async def memories(self, user_id: str, **params: Any) -> list[MemoryOut]:
        return await self.send(core.memories(user_id, params))

    async def get_memory(self, user_id: str, memory_id: int) -> MemoryDetailOut:
        return await self.send(core.get_memory(user_id, memory_id))

    async def update_memory(self, user_id: str, memory_id: int, **fields: Any) -> MemoryWriteOut:
        return await self.send(core.update_memory(user_id, memory_id, fields))

    async def delete_memory(self, user_id: str, memory_id: int) -> None:
        await self.send(core.delete_memory(user_id, memory_id))

    async def export(self, user_id: str) -> dict[str, Any]:
        return await self.send(core.export(user_id))
