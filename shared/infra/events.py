"""Live events of a turn (token deltas, tool calls, completion) on a Redis stream.

A stream rather than plain pub/sub: a client that connects after generation began still gets
every delta from the first one, in order, and a reconnecting client resumes from its last id.
A running turn's stream expires an hour after its last event; a finished turn's (its `done` or `error`
written) five minutes after, long enough for a client to reconnect and read its tail. Later readers get the
reply from the turn row in Postgres, which remains the record. Each turn's events take about 4 KiB of
Redis memory, so the shorter life keeps Redis to the turns of the last minutes, not of the last hour.
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
FINISHED_STREAM_TTL_SECONDS = 300
STREAM_MAXLEN = 20_000
TERMINAL_EVENTS = frozenset({"done", "error"})


def stream_key(turn_id: int) -> str:
    return f"engram:turn:{turn_id}:events"


# Deltas arriving within this long of the last write are held and written together with the next one.
DELTA_BATCH_WINDOW_SECONDS = 0.02


class TurnEventPublisher:
    """Writes a turn's events to its stream, in order, one Redis round trip per burst.

    A model streaming fast (a local model, a cached reply) sends fragments far quicker than a round trip
    each; waiting on one per fragment made the worker spend more time on Redis than on the turn. So a
    delta is written at once when the last write was at least DELTA_BATCH_WINDOW_SECONDS ago, and held
    otherwise: held deltas go out (each still its own stream entry, in order) with the next write — the
    next delta past the window, any other event, or `flush()`, which the model loop calls when a model
    call ends, so text before a tool call is never held while the tool runs."""

    def __init__(self, client: redis.Redis, turn_id: int, *, batch_window: float = DELTA_BATCH_WINDOW_SECONDS) -> None:
        self.client = client
        self.key = stream_key(turn_id)
        self.batch_window = batch_window
        self._held: list[tuple[str, dict[str, Any]]] = []
        self._last_write = -float("inf")

    def publish(self, event: str, **data: Any) -> None:
        self._held.append((event, data))
        if event == "delta" and time.monotonic() - self._last_write < self.batch_window:
            return
        self.flush()

    def flush(self) -> None:
        """Write what is held. Best effort: a Redis hiccup must not fail the turn; clients fall back to the
        turn row."""
        if not self._held:
            return
        held, self._held = self._held, []
        self._last_write = time.monotonic()
        try:
            pipe = self.client.pipeline(transaction=False)
            for event, data in held:
                pipe.xadd(self.key, {"event": event, "data": json.dumps(data)}, maxlen=STREAM_MAXLEN, approximate=True)
            finished = any(event in TERMINAL_EVENTS for event, _ in held)
            pipe.expire(self.key, FINISHED_STREAM_TTL_SECONDS if finished else STREAM_TTL_SECONDS)
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
