"""The database's single embedding space: which model made the vectors in `memory_chunks`.

Vectors from different models (or dimensions) cannot be compared, so a database holds vectors of one
model only, recorded in the one-row `embedding_space` table. The first embedder to write fixes the
space: `ensure_embedding_space` records it, types `memory_chunks.embedding` as `vector(<dim>)` and
builds the HNSW index. Configuring another model afterwards raises `EmbeddingSpaceMismatch` until
`reindex` re-embeds everything with it. The exception is an embedder that follows spaces (the local
model on the default backend, `auto`): it makes whichever local space the database records (fp32 or int8)
and fixes int8 for a new one; moving an existing database to the other is done by configuring it explicitly
and reindexing.

Decision for a missing `embedding_space` row while `memory_chunks` already holds vectors (the row was
deleted by hand, or a restore lost it): nothing records which model made those vectors, so they are
never adopted silently, even when their dimension matches. `ensure_embedding_space` raises
`EmbeddingSpaceMismatch` and `reindex` (which needs no row) re-embeds them. When there are no vectors
(e.g. tests truncated every table but the column kept its type), the column type is simply reset.

HNSW indexes `vector` columns of at most 2000 dimensions. Larger spaces (text-embedding-3-large's
3072) get no index: vector search then scans exactly, which is correct but slower; configure
`ENGRAM_EMBEDDING_DIMENSIONS` ≤ 2000 to keep the index.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from pgvector import Vector

from shared.embeddings.base import Embedder
from shared.embeddings.cache import embed_texts, register_vector_types
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import Conn, Query
from shared.infra.logging import get_logger

log = get_logger(__name__)

INDEX_NAME = "memory_chunks_embedding_hnsw"
HNSW_MAX_DIMENSIONS = 2000
# Serialises everything that changes the space (first setup, reindex) across processes.
_LOCK_NAME = "engram:embedding_space"
# How long a successful check is trusted without asking the database again. Bounded, so a worker that
# missed an `engram reindex` in another process notices within this time rather than never.

ConnFactory = Callable[[], AbstractContextManager[Conn]]
Progress = Callable[[int, int], None]


class EmbeddingSpaceMismatch(RuntimeError):
    """The configured embedder does not match the model that made the database's vectors."""

    def __init__(self, message: str, *, stored: str | None, configured: str) -> None:
        super().__init__(message)
        self.stored = stored  # "local/all-MiniLM-L6-v2 (384 dims)", or None when the origin is unknown
        self.configured = configured


class SpaceChanged(EmbeddingSpaceMismatch):
    """Vectors were made for a space the database no longer records (a reindex switched it meanwhile); nothing
    was stored. Worth a retry: it checks the space afresh, and an embedder that follows spaces follows."""


def describe(provider: str, model: str, dimension: int) -> str:
    return f"{provider}/{model} ({dimension} dims)"


def _describe_embedder(embedder: Embedder) -> str:
    return describe(embedder.provider, embedder.model, embedder.dimension)


def _makes(space: Mapping[str, Any] | None, embedder: Embedder) -> bool:
    """Whether `embedder`'s vectors belong to the recorded `space` (same model, same dimension)."""
    return space is not None and space["model"] == embedder.model and space["dimension"] == embedder.dimension


# ---------------------------------------------------------------------------------------------------
# Process-wide memo of spaces already checked

_checked: dict[tuple[str, str, int], float] = {}
_checked_lock = threading.Lock()


def forget_checked_spaces() -> None:
    """Make the next `ensure_embedding_space` ask the database again (after reindex, in tests)."""
    with _checked_lock:
        _checked.clear()


def _check_key(conn: Conn, embedder: Embedder) -> tuple[str, str, int]:
    info = conn.info
    return (f"{info.host}:{info.port}/{info.dbname}", embedder.model, embedder.dimension)


def _recently_checked(key: tuple[str, str, int]) -> bool:
    with _checked_lock:
        at = _checked.get(key)
    return at is not None and time.monotonic() - at < get_settings().embedding_space_check_seconds


def _remember(key: tuple[str, str, int]) -> None:
    with _checked_lock:
        _checked[key] = time.monotonic()


# ---------------------------------------------------------------------------------------------------
# Reading the space


SPACE_QUERY: Query = ("SELECT provider, model, dimension, status, updated_at FROM embedding_space", ())


def current_space(conn: Conn, rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any] | None:
    """{provider, model, dimension, status, updated_at}, or None before anything was embedded.

    `rows`: what SPACE_QUERY returned a moment ago in the caller's transaction (sent along with other reads,
    it costs no round trip of its own); None = read it now."""
    if rows is None:
        rows = conn.execute(*SPACE_QUERY).fetchall()
    return dict(rows[0]) if rows else None


def vector_search_available(conn: Conn, rows: Sequence[Mapping[str, Any]] | None = None) -> bool:
    """True when vectors can be searched; False before the first embedding and during a reindex."""
    space = current_space(conn, rows)
    return space is not None and space["status"] == "ready"


@runtime_checkable
class FollowsSpace(Protocol):
    """An embedder that can make more than one space and switches to the one a database records
    (the local model with ENGRAM_EMBEDDING_BACKEND=auto: fp32 or int8)."""

    def follow(self, model: str, dimension: int) -> bool: ...


def follow_recorded_space(embedder: Embedder, space: Mapping[str, Any] | None) -> None:
    """Switch an embedder that follows spaces to the recorded one (it ignores a space it cannot make);
    any other embedder is left as configured and the comparison decides."""
    if space is not None and isinstance(embedder, FollowsSpace):
        embedder.follow(space["model"], space["dimension"])


# ---------------------------------------------------------------------------------------------------
# Fixing the space on first use


def ensure_embedding_space(
    conn: Conn, embedder: Embedder, space_rows: Sequence[Mapping[str, Any]] | None = None
) -> None:
    """Make sure `embedder`'s vectors may be stored: record the space on first use, else compare.

    Raises `EmbeddingSpaceMismatch` when the database's vectors belong to another model or dimension.
    Runs in the caller's transaction; on first use it alters `memory_chunks`, whose lock is then held
    until the caller commits, so call it early in a short transaction. `space_rows`: as for `current_space`.
    """
    # With the rows at hand the comparison costs no round trip, so the memo is not trusted over them.
    if space_rows is None and _recently_checked(_check_key(conn, embedder)):
        return
    space = current_space(conn, space_rows)
    if space is None:
        with conn.transaction():
            _lock(conn)
            space = current_space(conn)  # another process may have set it up while we waited
            if space is None:
                _create_space(conn, embedder)
                # Not memoised: the caller's transaction may still roll the new space back, and a memo
                # would then let vectors into an untyped column. The next call reads the committed row.
                return
    follow_recorded_space(embedder, space)
    _require_same(space, embedder)
    _remember(_check_key(conn, embedder))  # the key of the model it makes now, if it followed


def ensure_space_for_pending(conn: Conn, embedder: Embedder, *, table: str, pending: str) -> bool:
    """`ensure_embedding_space` for a pass over pending rows (`db.claim_unlocked`'s `table` and `pending`): False,
    and no space recorded, when there are none, so the first write records the model configured by then. The look
    for work runs only where the check itself would (no recent check in this process): a pass's claim finds out
    soon enough otherwise, and a pass per turn pays no extra round trip."""
    if not _recently_checked(_check_key(conn, embedder)) and not db.any_pending(conn, table=table, pending=pending):
        return False
    ensure_embedding_space(conn, embedder)
    return True


def hold_space_for_write(conn: Conn, embedder: Embedder) -> None:
    """Call in the transaction that stores `embedder`'s vectors, before it stores them. Share-locks the space
    row until that transaction ends, so no reindex switches the space under the write, and refuses (raising
    `SpaceChanged`, nothing written) when the database records another model by now.

    `ensure_embedding_space` trusts a check for ENGRAM_EMBEDDING_SPACE_CHECK_SECONDS: a process that checked
    just before an `engram reindex` elsewhere switched the space would otherwise store its old model's vectors
    after the switch cleared the column, among the new model's, and when both models have the same dimension
    (fp32 and int8 MiniLM) nothing would ever notice. Refused, the work stays pending and its retry checks the
    space afresh (an embedder that follows spaces follows the new one)."""
    row = conn.execute("SELECT provider, model, dimension, status FROM embedding_space FOR SHARE").fetchone()
    if _makes(row, embedder):
        return
    forget_checked_spaces()
    configured = _describe_embedder(embedder)
    stored = describe(row["provider"], row["model"], row["dimension"]) if row is not None else None
    raise SpaceChanged(
        f"the embedding space changed to {stored or 'nothing recorded'} while these vectors were made with "
        f"{configured}; they were not stored (the work stays pending for a retry)",
        stored=stored,
        configured=configured,
    )


def _create_space(conn: Conn, embedder: Embedder) -> None:
    dimension = embedder.dimension
    # Blocks chunk writers (and other DDL) so no vector can slip in between the check and the ALTER.
    conn.execute("LOCK TABLE memory_chunks IN SHARE ROW EXCLUSIVE MODE")
    orphan = conn.execute(
        "SELECT vector_dims(embedding) AS dims FROM memory_chunks WHERE embedding IS NOT NULL LIMIT 1"
    ).fetchone()
    if orphan is not None:
        configured = _describe_embedder(embedder)
        raise EmbeddingSpaceMismatch(
            f"memory_chunks already holds {orphan['dims']}-dimensional vectors but the database does not record "
            f"which model made them, so they cannot be trusted to match the configured {configured}; "
            "run `engram reindex` to re-embed everything with the configured model",
            stored=None,
            configured=configured,
        )
    if _column_dimension(conn) != dimension:
        # Every embedding is NULL (checked above), so this is instant and loses nothing.
        conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
        conn.execute(f"ALTER TABLE memory_chunks ALTER COLUMN embedding TYPE vector({int(dimension)}) USING NULL")
    _create_index(conn, dimension)
    conn.execute(
        "INSERT INTO embedding_space (provider, model, dimension, status) VALUES (%s, %s, %s, 'ready')",
        (embedder.provider, embedder.model, dimension),
    )
    log.info("embedding_space_created", provider=embedder.provider, model=embedder.model, dimension=dimension)


def _require_same(space: dict[str, Any], embedder: Embedder) -> None:
    if _makes(space, embedder):
        return
    stored = describe(space["provider"], space["model"], space["dimension"])
    configured = _describe_embedder(embedder)
    made = "are being re-made (reindex in progress)" if space["status"] == "reindexing" else "were made"
    raise EmbeddingSpaceMismatch(
        f"the database's vectors {made} with {stored} but the configured model is {configured}; "
        "run `engram reindex` to re-embed everything with the new model, "
        "or set ENGRAM_EMBEDDING_PROVIDER/ENGRAM_EMBEDDING_MODEL back",
        stored=stored,
        configured=configured,
    )


# ---------------------------------------------------------------------------------------------------
# Reindex


def reindex(conn_factory: ConnFactory, embedder: Embedder, *, batch_size: int, progress: Progress | None = None) -> int:
    """Switch the space to `embedder` and re-embed every chunk; returns how many chunks were embedded.

    `conn_factory()` must give a connection whose `with` block is one transaction that commits on exit
    (`shared.infra.db.connection`, or `psycopg.connect`). `progress(done, total)` is called after each batch.

    Restartable: chunks whose embedding is NULL are the work list, and the switch itself (index dropped,
    all vectors cleared, column retyped, space row updated) commits atomically, so after a crash running
    it again with the same embedder skips the switch and embeds what is left. Searches fall back to full
    text while the status is 'reindexing'. Called with the space's own model, it only fills in missing
    vectors and keeps the index (and vector search) in place.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    with conn_factory() as conn:
        space = current_space(conn)
        column_dimension = _column_dimension(conn)
    # An embedder that follows the database's space keeps it (only missing vectors are made); switching
    # spaces is asked for by configuring one explicitly.
    follow_recorded_space(embedder, space)
    target_model, dimension = embedder.model, embedder.dimension
    if not _makes(space, embedder) or column_dimension != dimension:
        _switch(conn_factory, embedder, space)
    forget_checked_spaces()

    with conn_factory() as conn:
        total = _count_missing(conn)
    if progress is not None:
        progress(0, total)
    done = 0
    while True:
        # Passes restart from the lowest id until one finds nothing: a chunk with a lower id than the
        # pass has reached can still appear (its writer committed late) and must not be left NULL.
        embedded = _embed_pass(conn_factory, embedder, batch_size, done, total, progress)
        done += embedded
        if embedded == 0:
            break

    with conn_factory() as conn:
        _lock(conn)
        space = current_space(conn)
        if space is None or space["model"] != target_model or space["dimension"] != dimension:
            raise RuntimeError("another reindex changed the embedding space while this one ran; run it again")
        _create_index(conn, dimension)
        conn.execute("UPDATE embedding_space SET status = 'ready', updated_at = now()")
    forget_checked_spaces()
    log.info("reindex_done", provider=embedder.provider, model=target_model, dimension=dimension, chunks=done)
    return done


def _switch(conn_factory: ConnFactory, embedder: Embedder, space: dict[str, Any] | None) -> None:
    if space is not None and space["status"] == "ready":
        # Committed on its own, first: searches stop using the old vectors at once, even while the
        # switch below waits for the table lock behind long-running readers.
        with conn_factory() as conn:
            conn.execute("UPDATE embedding_space SET status = 'reindexing', updated_at = now()")
    dimension = int(embedder.dimension)
    with conn_factory() as conn:
        _lock(conn)
        # The space row first, the table after: a vector writer holds the row (hold_space_for_write) and
        # then writes the table, so taking them in the other order could deadlock with it.
        conn.execute(
            """INSERT INTO embedding_space (provider, model, dimension, status) VALUES (%s, %s, %s, 'reindexing')
               ON CONFLICT (id) DO UPDATE SET provider = EXCLUDED.provider, model = EXCLUDED.model,
                   dimension = EXCLUDED.dimension, status = 'reindexing', updated_at = now()""",
            (embedder.provider, embedder.model, dimension),
        )
        conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
        # USING NULL clears every vector in the same table rewrite that retypes the column.
        conn.execute(f"ALTER TABLE memory_chunks ALTER COLUMN embedding TYPE vector({dimension}) USING NULL")
    log.info("reindex_switched", provider=embedder.provider, model=embedder.model, dimension=dimension)


def _embed_pass(
    conn_factory: ConnFactory,
    embedder: Embedder,
    batch_size: int,
    done_before: int,
    total: int,
    progress: Progress | None,
) -> int:
    embedded, last_id = 0, 0
    while True:
        with conn_factory() as conn:  # one transaction per batch: a crash loses at most one batch
            register_vector_types(conn)
            rows = conn.execute(
                "SELECT id, text FROM memory_chunks WHERE embedding IS NULL AND id > %s ORDER BY id LIMIT %s",
                (last_id, batch_size),
            ).fetchall()
            if not rows:
                return embedded
            vectors = embed_texts(conn, embedder, [row["text"] for row in rows], batch_size)
            with conn.cursor() as cur:
                # `embedding IS NULL`: a writer that embedded the chunk meanwhile used the same model.
                cur.executemany(
                    "UPDATE memory_chunks SET embedding = %s::vector WHERE id = %s AND embedding IS NULL",
                    [(Vector(v), row["id"]) for row, v in zip(rows, vectors, strict=True)],
                )
        last_id = rows[-1]["id"]
        embedded += len(rows)
        if progress is not None:
            done = done_before + embedded
            progress(done, max(total, done))


# ---------------------------------------------------------------------------------------------------
# Helpers


def _lock(conn: Conn) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_LOCK_NAME,))


def _column_dimension(conn: Conn) -> int | None:
    """The n of `memory_chunks.embedding vector(n)`, or None while the column is untyped."""
    row = conn.execute(
        """SELECT atttypmod FROM pg_attribute
            WHERE attrelid = 'memory_chunks'::regclass AND attname = 'embedding' AND NOT attisdropped"""
    ).fetchone()
    typmod = int(row["atttypmod"]) if row is not None else -1
    return typmod if typmod > 0 else None


def _create_index(conn: Conn, dimension: int) -> None:
    if dimension > HNSW_MAX_DIMENSIONS:
        log.warning("embedding_index_skipped", dimension=dimension, limit=HNSW_MAX_DIMENSIONS)
        return
    conn.execute(f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON memory_chunks USING hnsw (embedding vector_cosine_ops)")


def _count_missing(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE embedding IS NULL").fetchone()
    return int(row["n"]) if row is not None else 0
