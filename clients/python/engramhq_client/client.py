"""`EngramClient` (httpx.Client) and `AsyncEngramClient` (httpx.AsyncClient): the same methods, each taken
from its request builder in `core` by `Operation`, so an operation's parameters, request and answer are
written once; only sending and sleeping differ."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import httpx

from engramhq_client import core
from engramhq_client.core import Call, IdleWait
from engramhq_client.models import MemoryStatusOut

T = TypeVar("T")
P = ParamSpec("P")


class Operation(Generic[P, T]):
    """A client method made from a `core` builder: it takes the builder's parameters and sends the call it
    builds; the synchronous client returns the answer, the asynchronous one a coroutine of it."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> Operation[P, T]: ...

    @overload
    def __get__(self, client: EngramClient, owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(self, client: AsyncEngramClient, owner: type) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, client: _Operations | None, owner: type) -> Any:
        if client is None:
            return self
        build, send = self.build, client.send

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(build(*args, **kwargs))

        return method


class _Operations:
    """The operations both clients offer (their `send` differs)."""

    def send(self, call: Call[Any]) -> Any:
        raise NotImplementedError

    # --- conversations ----------------------------------------------------------------------
    ingest = Operation(core.ingest)
    memory_status = Operation(core.memory_status)
    context = Operation(core.context)

    # --- memories ---------------------------------------------------------------------------
    search = Operation(core.search)
    add_memory = Operation(core.add_memory)
    memories = Operation(core.memories)
    get_memory = Operation(core.get_memory)
    update_memory = Operation(core.update_memory)
    delete_memory = Operation(core.delete_memory)
    export = Operation(core.export)


class EngramClient(_Operations):
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
        return call.parse(self.http.request(**core.request_args(call)))

    def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        """Poll memory-status until every message is mined and every memory embedded (TimeoutError after
        `timeout` seconds)."""
        wait = IdleWait(session_key, timeout)
        while not wait.done(status := self.memory_status(user_id, session_key)):
            time.sleep(interval)
        return status


class AsyncEngramClient(_Operations):
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
        return call.parse(await self.http.request(**core.request_args(call)))

    async def wait_until_idle(
        self, user_id: str, session_key: str, *, timeout: float = 60.0, interval: float = 0.5
    ) -> MemoryStatusOut:
        """Poll memory-status until every message is mined and every memory embedded (TimeoutError after
        `timeout` seconds)."""
        wait = IdleWait(session_key, timeout)
        while not wait.done(status := await self.memory_status(user_id, session_key)):
            await asyncio.sleep(interval)
        return status
