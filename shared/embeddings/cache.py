"""Embed texts through the `embedding_cache` table, so identical text is embedded once per model.

Cache rows are keyed by (model, dimension, sha256(text)). The model is stored qualified by the
provider ("local/all-MiniLM-L6-v2", "openai/text-embedding-3-small"), because two providers may serve
models of the same name whose vectors are not interchangeable.

Everything runs in the caller's transaction: the cache rows written here become visible when the
caller commits, together with whatever they stored the vectors for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from pgvector import Vector
from pgvector.psycopg import register_vector

from shared.embeddings.base import Embedder, EmbeddingError
from shared.infra.db import Conn
from shared.infra.metrics import observe_embedding_call

# Hits refresh `last_used_at` only when it is older than this: a cache hit then usually costs no write
# at all, and eviction works in days, so an hour of imprecision is irrelevant.
_TOUCH_GRANULARITY = "1 hour"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_model(embedder: Embedder) -> str:
    """The `model` value of this embedder's cache rows."""
    return f"{embedder.provider}/{embedder.model}"


def register_vector_types(conn: Conn) -> None:
    """Teach this connection the pgvector types (vectors load as `pgvector.Vector`); idempotent.

    Registration is per connection and costs a few catalog queries, so it is done once: pooled
    connections keep their adapters for life.
    """
    if conn.adapters.types.get("vector") is None:
        register_vector(conn)


def embed_texts(conn: Conn, embedder: Embedder, texts: Sequence[str], batch_size: int) -> list[list[float]]:
    """Vectors for `texts`, in input order; only texts not cached for this model are embedded.

    Identical texts are embedded once per call. The misses go to the embedder in batches of at most
    `batch_size` texts.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if not texts:
        return []
    register_vector_types(conn)
    model, dimension = cache_model(embedder), embedder.dimension
    hashes = [content_hash(text) for text in texts]
    unique = dict(zip(hashes, texts, strict=True))  # first-seen order, duplicates collapsed

    rows = conn.execute(
        """SELECT content_hash, embedding, last_used_at < now() - %s::interval AS stale
             FROM embedding_cache
            WHERE model = %s AND dimension = %s AND content_hash = ANY(%s)""",
        (_TOUCH_GRANULARITY, model, dimension, list(unique)),
    ).fetchall()
    vectors: dict[str, list[float]] = {row["content_hash"]: row["embedding"].to_list() for row in rows}
    _touch(conn, model, dimension, sorted(row["content_hash"] for row in rows if row["stale"]))

    # Sorted so that concurrent transactions insert overlapping keys in the same order: a unique-index
    # insert waits for an in-flight insert of the same key, and opposite orders would deadlock.
    misses = sorted(h for h in unique if h not in vectors)
    for start in range(0, len(misses), batch_size):
        batch = misses[start : start + batch_size]
        fresh = embedder.embed([unique[h] for h in batch])
        check_vectors(embedder, fresh, expected_count=len(batch), dimension=dimension)
        observe_embedding_call(model, len(batch))
        with conn.cursor() as cur:
            cur.executemany(
                """INSERT INTO embedding_cache (model, dimension, content_hash, embedding)
                   VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
                [(model, dimension, h, Vector(v)) for h, v in zip(batch, fresh, strict=True)],
            )
        vectors.update(zip(batch, fresh, strict=True))

    # Copies, so that callers holding two equal texts cannot alias each other's vectors.
    return [list(vectors[h]) for h in hashes]


def evict_stale(conn: Conn, older_than_days: int = 30) -> int:
    """Delete cache rows unused for `older_than_days`; returns how many went."""
    cur = conn.execute(
        "DELETE FROM embedding_cache WHERE last_used_at < now() - make_interval(days => %s)", (older_than_days,)
    )
    return cur.rowcount


def forget_unused(conn: Conn, hashes: Sequence[str]) -> int:
    """Delete the cached vectors of these text hashes that no chunk uses any more (call it after deleting
    chunks): a vector can be inverted into an approximation of its text, and text another chunk still
    has stays cached for it. Returns how many went."""
    if not hashes:
        return 0
    return conn.execute(
        """DELETE FROM embedding_cache ec WHERE ec.content_hash = ANY(%s)
             AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.content_hash = ec.content_hash)""",
        (sorted(set(hashes)),),
    ).rowcount


def _touch(conn: Conn, model: str, dimension: int, hashes: list[str]) -> None:
    if not hashes:
        return
    # SKIP LOCKED: a row another transaction is touching (or inserting) needs no second touch, and
    # waiting for it would only serialise readers of popular texts (or deadlock them).
    conn.execute(
        """UPDATE embedding_cache SET last_used_at = now()
            WHERE (model, dimension, content_hash) IN (
                  SELECT model, dimension, content_hash FROM embedding_cache
                   WHERE model = %s AND dimension = %s AND content_hash = ANY(%s)
                   ORDER BY content_hash
                   FOR UPDATE SKIP LOCKED)""",
        (model, dimension, hashes),
    )


def check_vectors(embedder: Embedder, vectors: list[list[float]], *, expected_count: int, dimension: int) -> None:
    """Refuse a reply of the wrong size: a wrong-sized vector would poison the cache for every later caller
    (or fail the search it was made for)."""
    if len(vectors) != expected_count:
        raise EmbeddingError(f"{cache_model(embedder)} returned {len(vectors)} vectors for {expected_count} texts")
    for vector in vectors:
        if len(vector) != dimension:
            raise EmbeddingError(
                f"{cache_model(embedder)} returned a {len(vector)}-dimensional vector, expected {dimension}"
            )
