"""Transcript units: what the embedding drain does with them, and how far it has got.

A unit (a `memory_chunks` row with `message_id` set) is written by the database itself, in the transaction
that stores, edits or deletes its message (migration 0015's trigger): it is found by full text from that
commit on. Its vector is the drain's work: `embed_pending_units` takes the oldest units without one, embeds
their `text` in one model call and stores the vectors, unless the unit was rebuilt meanwhile (its
`content_hash` no longer the one embedded: the new text waits for the next drain).

Concurrent drains skip each other's units through transaction-scoped advisory locks, as memories do
(shared/memory/indexing.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pgvector import Vector

from shared.embeddings import Embedder, embed_texts, ensure_space_for_pending, hold_space_for_write
from shared.embeddings.cache import register_vector_types
from shared.infra import db
from shared.infra.db import Conn
from shared.infra.metrics import observe_embedding_lag


def transcript_batch_size(embedding_batch_size: int) -> int:
    """Units per drain task: a quarter of a memory batch. The units' drain is bulk work that yields to due memory
    jobs only between tasks, and the worker process it holds is not running them meanwhile; a smaller batch
    holds it for less (16 units of a long conversation: about half a second of the local model)."""
    return max(1, embedding_batch_size // 4)


@dataclass(frozen=True)
class UnitBatch:
    """What one `embed_pending_units` run did."""

    units: int  # units whose vector was stored
    more: bool  # units were left without a vector for another run
    # More were left than a conversation keeps adding between two runs: an import's backlog, which waits for
    # the memory jobs that are due (see live_backlog).
    backlog: bool = False


_PENDING = "message_id IS NOT NULL AND embedding IS NULL"


def _claim(conn: Conn, limit: int) -> list[dict[str, Any]]:
    return db.claim_unlocked(
        conn,
        table="memory_chunks",
        fields="id, session_id, message_id, text, content_hash, created_at",
        pending=_PENDING,
        lock="embed-unit",
        limit=limit,
    )


def embed_pending_units(embedder: Embedder, batch_size: int) -> UnitBatch:
    """Embed up to `batch_size` units that have no vector yet (one model call) and store their vectors."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    with db.connection() as conn:  # its own transaction, and only with work to do: see index_pending_memories
        if not ensure_space_for_pending(conn, embedder, table="memory_chunks", pending=_PENDING):
            return UnitBatch(0, more=False)
    with db.connection() as conn:
        claimed = _claim(conn, batch_size)
        if not claimed:
            return UnitBatch(0, more=False)
        register_vector_types(conn)
        vectors = embed_texts(conn, embedder, [unit["text"] for unit in claimed], batch_size)
        hold_space_for_write(conn, embedder)
        # Sessions before units, the order a turn's write takes them (its session row, then its messages' units
        # through the trigger): the other order deadlocked a drain with a turn of the same session.
        last: dict[int, int] = {}
        for unit in claimed:
            last[unit["session_id"]] = max(last.get(unit["session_id"], 0), unit["message_id"])
        with conn.cursor() as cur:
            cur.executemany(
                """UPDATE sessions SET last_embedded_message_id = greatest(last_embedded_message_id, %s)
                   WHERE id = %s""",
                [(message_id, session_id) for session_id, message_id in sorted(last.items())],
            )
        with conn.cursor() as cur:
            cur.executemany(
                """UPDATE memory_chunks SET embedding = %s, embedded_at = now()
                   WHERE id = %s AND content_hash = %s AND embedding IS NULL""",
                [
                    (Vector(vector), unit["id"], unit["content_hash"])
                    for unit, vector in zip(claimed, vectors, strict=True)
                ],
            )
        now = datetime.now(UTC)
        for unit in claimed:
            observe_embedding_lag("transcript", (now - unit["created_at"]).total_seconds())
        more = len(claimed) == batch_size
        return UnitBatch(len(claimed), more=more, backlog=more and is_backlog(conn, batch_size))


def live_backlog(batch_size: int) -> int:
    """Units without a vector that still count as conversations keeping up (four drain runs' worth): more than
    that is an import or a catch-up, embedded after the memory jobs that are due."""
    return 4 * batch_size


def is_backlog(conn: Conn, batch_size: int) -> bool:
    limit = live_backlog(batch_size)
    return pending_units(conn, limit=limit + 1) > limit


def pending_units(conn: Conn, limit: int = 1000) -> int:
    """Units still without a vector (up to `limit`): the beat sweep requests a drain while there are any."""
    row = conn.execute(
        """SELECT count(*) AS n FROM (
               SELECT 1 FROM memory_chunks WHERE message_id IS NOT NULL AND embedding IS NULL LIMIT %s) p""",
        (limit,),
    ).fetchone()
    return int(row["n"]) if row else 0
