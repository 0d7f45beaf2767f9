"""A no-op round trip through the broker and a worker: the floor a turn's trip through the queue is
measured against (ops/bench/turns.py), and a quick "is anything consuming this queue?" probe.

The sender picks a reply key under PING_PREFIX and blocks on it; the task pushes one item there. The
key expires on its own, so an abandoned probe leaves nothing behind."""

from __future__ import annotations

import uuid

import redis

from shared.infra.redis_client import get_redis

PING_PREFIX = "engram:ping:"
REPLY_TTL_SECONDS = 60


def new_reply_key() -> str:
    return f"{PING_PREFIX}{uuid.uuid4().hex}"


def answer_ping(reply_to: str) -> None:
    """The task's whole work. Only keys under PING_PREFIX: a task message must not be able to write
    anywhere else in Redis."""
    if not reply_to.startswith(PING_PREFIX):
        raise ValueError(f"reply key must start with {PING_PREFIX!r}")
    pipe = get_redis().pipeline(transaction=False)
    pipe.rpush(reply_to, "pong")
    pipe.expire(reply_to, REPLY_TTL_SECONDS)
    pipe.execute()


def wait_for_pong(client: redis.Redis, reply_to: str, timeout: float) -> bool:
    """True once the worker answered, False after `timeout` seconds."""
    return client.blpop([reply_to], timeout=timeout) is not None
