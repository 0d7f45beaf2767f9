"""Turning memories into embedded chunks (run on the `embeddings` queue after the write commits).

Re-indexing a memory replaces its chunks in one transaction, so running it twice, or after a
crash half-way, leaves exactly one set of chunks that matches the memory's current text.

Pending work lives in Postgres: an active memory with `embedded_at` NULL (migration 0013) has not been
embedded yet. `index_pending_memories` takes the oldest pending memories, as many as fit in one model
call (`batch_size` texts), and writes all their chunks in one transaction that also sets `embedded_at`;
a batch that dies half-way commits nothing, so the same memories are still pending for the next run.
Concurrent batches (several embedding processes) skip each other's memories through transaction-scoped
advisory locks rather than row locks, so a search touching a pending memory never waits for a model.

A memory with a context (`metadata.context`, see store.py) has it appended to every chunk: the chunk
comes first, so a model that truncates long input (MiniLM reads ~256 word pieces) always sees the
memory itself, and each chunk carries the context rather than one chunk holding all of it. The
chunk row's `text` is exactly what was embedded, so `reindex` (which re-embeds `text`) reproduces it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pgvector import Vector

from shared.embeddings import (
    Embedder,
    embed_texts,
    ensure_embedding_space,
    ensure_space_for_pending,
    hold_space_for_write,
)
from shared.embeddings.cache import register_vector_types
from shared.infra import db
from shared.infra.db import Conn
from shared.infra.metrics import observe_embedding_lag
from shared.memory.chunking import Chunk, split_text
from shared.memory.memory_input import CONTEXT_KEY, DEFAULT_NAMESPACE


def embeddable_text(memory: dict[str, Any]) -> str:
    """`key: value`, prefixed with the namespace when it is not the kind's default (it carries meaning:
    `daily/2026-11-21`, `entity/default`, …)."""
    body = f"{memory['key'].replace('-', ' ')}: {memory['value']}"
    if memory["namespace"] != DEFAULT_NAMESPACE.get(memory["kind"]):
        body = f"[{memory['namespace']}] {body}"
    return body


def embedding_inputs(memory: dict[str, Any]) -> list[tuple[Chunk, str]]:
    """The chunks of `embeddable_text(memory)`, each with the text to embed for it (the chunk, then
    the memory's context if it has one). `memory` needs namespace, key, value, kind; metadata optional."""
    context = (memory.get("metadata") or {}).get(CONTEXT_KEY)
    chunks = split_text(embeddable_text(memory))
    if not context:
        return [(chunk, chunk.text) for chunk in chunks]
    return [(chunk, f"{chunk.text}\n\nContext:\n{context}") for chunk in chunks]


_MEMORY_FIELDS = "id, tenant_id, user_id, namespace, key, value, kind, metadata, updated_at"


def index_memory(conn: Conn, embedder: Embedder, memory_id: int, batch_size: int = 64) -> int:
    """(Re)build the chunks of one memory; returns how many chunks it has now (0 if it is gone)."""
    memory = conn.execute(f"SELECT {_MEMORY_FIELDS} FROM memories WHERE id = %s", (memory_id,)).fetchone()
    if memory is None:
        return 0
    ensure_embedding_space(conn, embedder)
    inputs = embedding_inputs(memory)
    vectors = embed_texts(conn, embedder, [text for _, text in inputs], batch_size)
    # Lock the memory row so a concurrent re-index of the same memory waits instead of interleaving.
    conn.execute("SELECT id FROM memories WHERE id = %s FOR UPDATE", (memory_id,))
    _write_chunks(conn, embedder, [(memory, inputs, vectors)])
    return len(inputs)


def _write_chunks(
    conn: Conn, embedder: Embedder, items: list[tuple[dict[str, Any], list[tuple[Chunk, str]], list[list[float]]]]
) -> None:
    """Replace the chunks of these (already locked) memories with `embedder`'s vectors and mark them embedded."""
    hold_space_for_write(conn, embedder)
    ids = [memory["id"] for memory, _, _ in items]
    conn.execute("DELETE FROM memory_chunks WHERE memory_id = ANY(%s)", (ids,))
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO memory_chunks (tenant_id, user_id, memory_id, chunk_index, text, start_char, end_char,
                                          content_hash, embedding)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (
                    memory["tenant_id"],
                    memory["user_id"],
                    memory["id"],
                    chunk.index,
                    text,
                    chunk.start,  # offsets into embeddable_text(memory); `text` may add the context after it
                    chunk.end,
                    hashlib.sha256(text.encode()).hexdigest(),
                    Vector(vector),
                )
                for memory, inputs, vectors in items
                for (chunk, text), vector in zip(inputs, vectors, strict=True)
            ],
        )
    conn.execute("UPDATE memories SET embedded_at = now() WHERE id = ANY(%s)", (ids,))
    # Observed before the caller commits: the commit is milliseconds, the lag seconds to hours.
    now = datetime.now(UTC)
    for memory, _, _ in items:
        observe_embedding_lag("memory", (now - memory["updated_at"]).total_seconds())


@dataclass(frozen=True)
class PendingBatch:
    """What one `index_pending_memories` run did."""

    memories: int  # memories embedded (their chunks written, `embedded_at` set)
    chunks: int
    more: bool  # pending memories were left for another run


# Pending (for alias m): active, not embedded, and no chunks written by any other path (the partial index of
# migration 0013 serves the first two).
_PENDING = """m.embedded_at IS NULL AND m.valid_until IS NULL
              AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)"""


def _claim(conn: Conn, limit: int) -> list[dict[str, Any]]:
    """The oldest pending memories no other transaction is embedding, locked for this one."""
    return db.claim_unlocked(
        conn, table="memories", fields=_MEMORY_FIELDS, pending=_PENDING, lock="embed-memory", limit=limit
    )


def index_pending_memories(embedder: Embedder, batch_size: int) -> PendingBatch:
    """Embed the oldest pending memories whose chunks fit in one model call of `batch_size` texts (at least
    one memory, however many chunks it has), and write their chunks; idempotent (see the module doc)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    # The space is made sure of in a transaction of its own: its first use alters `memory_chunks` and builds
    # its index under a table lock, which inside the indexing transaction would be taken before the memories'
    # row locks, the opposite order of every writer that updates a memory and then drops its chunks. A pass with
    # nothing to embed records no space: the first write does, with the model configured by then.
    with db.connection() as conn:
        if not ensure_space_for_pending(conn, embedder, table="memories", pending=_PENDING):
            return PendingBatch(0, 0, more=False)
    with db.connection() as conn:
        claimed = _claim(conn, batch_size)
        batch: list[tuple[dict[str, Any], list[tuple[Chunk, str]]]] = []
        texts = 0
        for memory in claimed:
            inputs = embedding_inputs(memory)
            if batch and texts + len(inputs) > batch_size:
                break  # the rest stay pending (their locks go with this transaction)
            batch.append((memory, inputs))
            texts += len(inputs)
        if not batch:
            return PendingBatch(0, 0, more=False)
        register_vector_types(conn)
        # One model call (texts <= batch_size, or one long memory); cached texts cost none.
        vectors = embed_texts(conn, embedder, [text for _, inputs in batch for _, text in inputs], max(texts, 1))
        # Row locks only now, in id order like every other multi-memory writer, and only for the write: a
        # memory deleted or superseded while the model ran is not indexed (its writer dropped its chunks).
        active = {
            row["id"]
            for row in conn.execute(
                """SELECT id FROM memories WHERE id = ANY(%s) AND valid_until IS NULL AND embedded_at IS NULL
                   ORDER BY id FOR NO KEY UPDATE""",
                ([memory["id"] for memory, _ in batch],),
            ).fetchall()
        }
        items = []
        offset = 0
        for memory, inputs in batch:
            own = vectors[offset : offset + len(inputs)]
            offset += len(inputs)
            if memory["id"] in active:
                items.append((memory, inputs, own))
        if items:
            _write_chunks(conn, embedder, items)
        more = len(claimed) > len(batch) or len(claimed) == batch_size
        return PendingBatch(len(items), sum(len(inputs) for _, inputs, _ in items), more=more)


def unindexed_memory_ids(conn: Conn, limit: int = 1000) -> list[int]:
    """Active memories not embedded yet (their embedding task may be lost or failed for good)."""
    rows = conn.execute(
        f"SELECT id FROM memories m WHERE {_PENDING} ORDER BY id LIMIT %s",
        (limit,),
    ).fetchall()
    return [int(row["id"]) for row in rows]
