"""One Redis client per process (sync), and one async client per event loop (gateway streaming).

Every Redis client engram uses (locks, debounce tokens, rate limits, event streams, queue depths) is
built here, for a single server or through Redis Sentinel (shared/infra/sentinel.py): a Sentinel-managed
client looks the primary up when it connects, and drops its connections and looks again when the
server it reached has become a replica (redis-py's `SentinelManagedConnection`). The Celery broker
and beat use kombu's and RedBeat's own Sentinel support with the same addresses (workers/app.py)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel

from shared.infra.config import Settings, get_settings
from shared.infra.services import resolve_redis_sentinel, resolve_redis_url

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


def sentinel_timeouts(settings: Settings | None = None) -> dict[str, Any]:
    """Time limits of the connections to the sentinels themselves: a sentinel that is down or silent is
    skipped for the next one, instead of holding up the lookup of the primary."""
    settings = settings or get_settings()
    return {
        "socket_connect_timeout": settings.redis_connect_timeout_seconds,
        "socket_timeout": settings.redis_socket_timeout_seconds,
    }


def new_redis(**options: Any) -> redis.Redis:
    """A new sync client (its own connection pool) for the configured Redis: single server or Sentinel."""
    settings = get_settings()
    target = resolve_redis_sentinel(settings)
    if target is None:
        return redis.Redis.from_url(resolve_redis_url(settings), **client_timeouts(), **options)
    sentinel = redis.sentinel.Sentinel(
        list(target.sentinels), sentinel_kwargs=sentinel_timeouts(), **client_timeouts(), **options
    )
    return sentinel.master_for(target.service, redis_class=redis.Redis)


def get_redis() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = new_redis()
        return _client


def new_async_redis(**options: Any) -> aioredis.Redis:
    """A new async client for the configured Redis (bound to the event loop it is first used on)."""
    settings = get_settings()
    target = resolve_redis_sentinel(settings)
    if target is None:
        return aioredis.Redis.from_url(resolve_redis_url(settings), **client_timeouts(), **options)
    sentinel = aiosentinel.Sentinel(
        list(target.sentinels), sentinel_kwargs=sentinel_timeouts(), **client_timeouts(), **options
    )
    return sentinel.master_for(target.service, redis_class=aioredis.Redis)


def shared_async_redis() -> aioredis.Redis:
    """The async client of the running event loop, over one connection pool: event streams and long
    polls borrow a connection for each blocking read and return it, instead of opening (and
    tearing down) a client per request."""
    loop = asyncio.get_running_loop()
    with _lock:
        client = _async_clients.get(loop)
        if client is None:
            client = new_async_redis(client_name=STREAM_CLIENT_NAME)
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
