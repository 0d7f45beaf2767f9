"""Turning memories into embedded chunks (run on the `embeddings` queue after the write commits).

Re-indexing a memory replaces its chunks in one transaction, so running it twice, or after a
crash half-way, leaves exactly one set of chunks that matches the memory's current text.

A memory with a context (`metadata.context`, see store.py) has it appended to every chunk: the chunk
comes first, so a model that truncates long input (MiniLM reads ~256 word pieces) always sees the
memory itself, and each chunk carries the context rather than one chunk holding all of it. The
chunk row's `text` is exactly what was embedded, so `reindex` (which re-embeds `text`) reproduces it.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from pgvector import Vector

from shared import db
from shared.db import Conn
from shared.embeddings import Embedder, embed_texts, ensure_embedding_space
from shared.memory.chunking import Chunk, split_text
from shared.memory.store import CONTEXT_KEY, DEFAULT_NAMESPACE
from shared.metrics import observe_embedding_lag


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


def index_memory(conn: Conn, embedder: Embedder, memory_id: int, batch_size: int = 64) -> int:
    """(Re)build the chunks of one memory; returns how many chunks it has now (0 if it is gone)."""
    memory = conn.execute(
        "SELECT id, tenant_id, user_id, namespace, key, value, kind, metadata, updated_at FROM memories WHERE id = %s",
        (memory_id,),
    ).fetchone()
    if memory is None:
        return 0
    ensure_embedding_space(conn, embedder)
    inputs = embedding_inputs(memory)
    vectors = embed_texts(conn, embedder, [text for _, text in inputs], batch_size)
    # Lock the memory row so a concurrent re-index of the same memory waits instead of interleaving.
    conn.execute("SELECT id FROM memories WHERE id = %s FOR UPDATE", (memory_id,))
    conn.execute("DELETE FROM memory_chunks WHERE memory_id = %s", (memory_id,))
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO memory_chunks (tenant_id, user_id, memory_id, chunk_index, text, start_char, end_char,
                                          content_hash, embedding)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [
                (
                    memory["tenant_id"],
                    memory["user_id"],
                    memory_id,
                    chunk.index,
                    text,
                    chunk.start,  # offsets into embeddable_text(memory); `text` may add the context after it
                    chunk.end,
                    hashlib.sha256(text.encode()).hexdigest(),
                    Vector(vector),
                )
                for (chunk, text), vector in zip(inputs, vectors, strict=True)
            ],
        )
    # Observed before the caller commits: the commit is milliseconds, the lag seconds to hours.
    observe_embedding_lag("memory", (datetime.now(UTC) - memory["updated_at"]).total_seconds())
    return len(inputs)


def index_memory_committed(memory_id: int, embedder: Embedder, batch_size: int) -> int:
    """`index_memory` in its own transaction, after making sure of the embedding space in an earlier one.

    The first use of a space alters `memory_chunks` and builds its index under a table lock; inside the
    indexing transaction that lock would be taken before the memory's row lock, the opposite order of
    every writer that updates a memory and then drops its chunks (delete, decay), and the two deadlock."""
    with db.connection() as conn:
        ensure_embedding_space(conn, embedder)
    with db.connection() as conn:
        return index_memory(conn, embedder, memory_id, batch_size)


def unindexed_memory_ids(conn: Conn, limit: int = 1000) -> list[int]:
    """Active memories without chunks (their embedding task was lost or failed for good)."""
    rows = conn.execute(
        """SELECT m.id FROM memories m
           WHERE m.valid_until IS NULL AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)
             AND m.updated_at < now() - interval '15 minutes'  -- not merely waiting in a busy queue
           ORDER BY m.id LIMIT %s""",
        (limit,),
    ).fetchall()
    return [int(row["id"]) for row in rows]
