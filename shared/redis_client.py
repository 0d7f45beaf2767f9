"""One Redis client per process (sync) and a factory for async clients (gateway streaming)."""

from __future__ import annotations

import threading
from typing import Any

import redis
import redis.asyncio as aioredis

from shared.config import get_settings
from shared.services import resolve_redis_url

_client: redis.Redis | None = None
_lock = threading.Lock()

# Short timeouts: a dead Redis must surface as an error quickly, not hang a request or a task.
_TIMEOUTS: dict[str, Any] = {"socket_connect_timeout": 3, "socket_timeout": 10, "health_check_interval": 15}


def get_redis() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(resolve_redis_url(get_settings()), **_TIMEOUTS)
        return _client


def new_async_redis() -> aioredis.Redis:
    return aioredis.Redis.from_url(resolve_redis_url(get_settings()), **_TIMEOUTS)


def reset_redis() -> None:
    """Forget the client (after a fork, or in tests that restart the server)."""
    global _client
    with _lock:
        _client = None
