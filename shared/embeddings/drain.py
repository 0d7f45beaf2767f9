"""At most one queued "embed what is pending" task: the Redis token that collapses a burst of requests.

Every memory write asks for its embedding after it commits. Postgres already says what is pending
(shared/memory/indexing.py), so one queued drain serves every write made before it starts: a request
sends a task only if it sets the token (SET NX); the drain deletes the token as it starts, before it
reads what is pending, so a write committed after that read sends a new drain. The token expires, so
a drain lost with its message (or a Redis that lost the key) blocks nothing for long; the beat sweep
re-requests a drain while anything is pending. A second drain is harmless (it finds less or nothing).
"""

from __future__ import annotations

import redis

TOKEN_KEY = "engram:embeddings:drain-queued"
# Longer than a drain normally waits in a busy queue (so a burst collapses), short enough that a lost
# message costs little; after it a request sends another drain, which at worst finds nothing to do.
TOKEN_TTL_SECONDS = 60


def claim_request(client: redis.Redis) -> bool:
    """True if the caller should send a drain (no other one is queued)."""
    return bool(client.set(TOKEN_KEY, "1", nx=True, ex=TOKEN_TTL_SECONDS))


def drain_started(client: redis.Redis) -> None:
    """Called by a drain before it reads what is pending: later writes must queue another one."""
    client.delete(TOKEN_KEY)
