"""One Redis client per process (sync), and one async client per event loop (gateway streaming)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aioredis

from shared.config import get_settings
from shared.services import resolve_redis_url

_client: redis.Redis | None = None
_lock = threading.Lock()
# Async clients are bound to the loop they were made on: one per loop (a gateway has one).
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()
# Named so `CLIENT LIST` shows which connections the gateway's event streams hold.
STREAM_CLIENT_NAME = "engram-gateway-events"


def client_timeouts() -> dict[str, Any]:
    """Every Redis client's time limits (ENGRAM_REDIS_*): a Redis that is down or stopped answering must
    surface as an error within them, not hang a request or a task."""
    settings = get_settings()
    return {
        "socket_connect_timeout": settings.redis_connect_timeout_seconds,
        "socket_timeout": settings.redis_socket_timeout_seconds,
        "health_check_interval": settings.redis_health_check_interval_seconds,
    }


def get_redis() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(resolve_redis_url(get_settings()), **client_timeouts())
        return _client


def new_async_redis() -> aioredis.Redis:
    return aioredis.Redis.from_url(resolve_redis_url(get_settings()), **client_timeouts())


def shared_async_redis() -> aioredis.Redis:
    """The async client of the running event loop, over one connection pool: event streams and long
    polls borrow a connection for each blocking read and return it, instead of opening (and
    tearing down) a client per request."""
    loop = asyncio.get_running_loop()
    with _lock:
        client = _async_clients.get(loop)
        if client is None:
            client = aioredis.Redis.from_url(
                resolve_redis_url(get_settings()), client_name=STREAM_CLIENT_NAME, **client_timeouts()
            )
            _async_clients[loop] = client
        return client


async def close_shared_async_redis() -> None:
    """Close the running loop's shared client (gateway shutdown)."""
    with _lock:
        client = _async_clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


def reset_redis() -> None:
    """Forget the clients (after a fork, or in tests that restart the server)."""
    global _client
    with _lock:
        _client = None
        _async_clients.clear()
