"""At most one queued drain of each kind: the Redis token that collapses a burst of requests.

Two kinds of text wait for vectors, each with its own drain task: memories (facts, notes; every memory write
asks for its embedding after it commits) and transcript units (every stored message). Postgres already says
what is pending (shared/memory/indexing.py, shared/transcript/units.py), so one queued drain serves every
write made before it starts: a request sends a task only if it sets its kind's token (SET NX); the drain
deletes the token as it starts, before it reads what is pending, so a write committed after that read sends
a new drain. The token expires, so a drain lost with its message (or a Redis that lost the key) blocks
nothing for long; the beat sweep re-requests a drain while anything is pending. A second drain is harmless
(it finds less or nothing).
"""

from __future__ import annotations

from typing import Literal

import redis

DrainKind = Literal["memories", "transcript"]

# Longer than a drain normally waits in a busy queue (so a burst collapses), short enough that a lost
# message costs little; after it a request sends another drain, which at worst finds nothing to do.
TOKEN_TTL_SECONDS = 60


def token_key(kind: DrainKind) -> str:
    return f"engram:embeddings:{kind}-drain-queued"


def claim_request(client: redis.Redis, kind: DrainKind) -> bool:
    """True if the caller should send a drain of `kind` (no other one is queued)."""
    return bool(client.set(token_key(kind), "1", nx=True, ex=TOKEN_TTL_SECONDS))


def drain_started(client: redis.Redis, kind: DrainKind) -> None:
    """Called by a drain before it reads what is pending: later writes must queue another one."""
    client.delete(token_key(kind))
