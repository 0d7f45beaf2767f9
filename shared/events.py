"""Live events of a turn (token deltas, tool calls, completion) on a Redis stream.

A stream rather than plain pub/sub: a client that connects after generation began still gets
every delta from the first one, in order, and a reconnecting client resumes from its last id.
Streams expire an hour after their last event; the turn row in Postgres remains the record.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis

STREAM_TTL_SECONDS = 3600
STREAM_MAXLEN = 20_000
TERMINAL_EVENTS = frozenset({"done", "error"})


def stream_key(turn_id: int) -> str:
    return f"engram:turn:{turn_id}:events"


class TurnEventPublisher:
    def __init__(self, client: redis.Redis, turn_id: int) -> None:
        self.client = client
        self.key = stream_key(turn_id)

    def publish(self, event: str, **data: Any) -> None:
        """Best effort: a Redis hiccup must not fail the turn; clients fall back to the turn row."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(self.key, {"event": event, "data": json.dumps(data)}, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.expire(self.key, STREAM_TTL_SECONDS)
            pipe.execute()
        except redis.RedisError:
            pass


def _decode(fields: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    return fields[b"event"].decode(), json.loads(fields[b"data"])


async def read_events(
    client: aioredis.Redis, turn_id: int, *, last_id: str = "0", block_ms: int = 1000
) -> AsyncIterator[tuple[str, str, dict[str, Any]]]:
    """Yield (entry_id, event, data) from `last_id` on; yields ("", "idle", {}) after each quiet
    `block_ms` so the caller can check the turn row or its own deadline."""
    key = stream_key(turn_id)
    while True:
        result = await client.xread({key: last_id}, block=block_ms, count=200)
        if not result:
            yield "", "idle", {}
            continue
        for _key, entries in result:  # type: ignore[str-unpack]
            for entry_id, fields in entries:  # type: ignore[union-attr,str-unpack]
                last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                event, data = _decode(fields)  # type: ignore[arg-type]
                yield last_id, event, data


async def follow_events(
    client: aioredis.Redis, turn_id: int, deadline: float, last_id: str = "0"
) -> AsyncIterator[tuple[str, str, dict[str, Any]]]:
    """`read_events` until the monotonic `deadline`; a Redis error reads as a quiet moment ("idle"),
    so the caller falls back to the turn row (the truth) instead of failing."""
    while time.monotonic() < deadline:
        block_ms = int(max(50, min(1000, (deadline - time.monotonic()) * 1000)))
        try:
            async for entry, event, data in read_events(client, turn_id, last_id=last_id, block_ms=block_ms):
                if entry:
                    last_id = entry
                yield entry, event, data
                if event == "idle" or time.monotonic() >= deadline:
                    break
        except redis.RedisError:
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            yield "", "idle", {}
