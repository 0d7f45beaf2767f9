"""The embedding cache, the database's embedding space and reindexing, against a real Postgres.

A deterministic in-process embedder (the fake server's hashed bag of words) stands in for a model, so
these tests need no network and count exactly what was embedded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from ops.fake_llm import fake_embedding
from shared.access.auth import ensure_tenant
from shared.embeddings import space
from shared.embeddings.cache import cache_model, content_hash, embed_texts, evict_stale
from shared.embeddings.space import (
    INDEX_NAME,
    SPACE_QUERY,
    EmbeddingSpaceMismatch,
    SpaceChanged,
    current_space,
    ensure_embedding_space,
    forget_checked_spaces,
    hold_space_for_write,
    reindex,
    vector_search_available,
)
from shared.infra import db
from shared.memory import service
from shared.memory.indexing import PendingBatch, index_pending_memories
from shared.memory.memory_input import MemoryInput
from shared.memory.store import store_memory
from shared.transcript.units import UnitBatch, embed_pending_units
from shared.turns.accept import ensure_user
from tests.integration.test_memory_store import make_scope
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


class CountingEmbedder:
    """Embeds with `fake_embedding`, records every call, and can be told to fail after some calls."""

    def __init__(self, model: str, dimension: int, *, fail_after_calls: int | None = None) -> None:
        self.provider = "test"
        self.model = model
        self.dimension = dimension
        self.fail_after_calls = fail_after_calls
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail_after_calls is not None and len(self.calls) >= self.fail_after_calls:
            raise RuntimeError("simulated crash")
        self.calls.append(list(texts))
        return [fake_embedding(text, self.dimension) for text in texts]

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.calls for text in call]


class MirroredEmbedder(CountingEmbedder):
    """Another model of the same dimension: every vector is the counting embedder's, negated."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[-x for x in vector] for vector in super().embed(texts)]


@pytest.fixture(autouse=True)
def fresh_checks(clean_state: TestServices) -> Iterator[None]:
    # The tables were truncated, so no memo of an earlier check may survive into (or out of) a test.
    forget_checked_spaces()
    yield
    forget_checked_spaces()


def _index_exists() -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (INDEX_NAME,)).fetchone()
    return row is not None


def _column_dimension() -> int:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memory_chunks'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert row is not None
    return int(row["atttypmod"])


def _insert_chunks(texts: Sequence[str]) -> list[int]:
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-a")
        user_id = ensure_user(conn, tenant_id, "user-1")
        memory = conn.execute(
            """INSERT INTO memories (tenant_id, user_id, namespace, key, value)
               VALUES (%s, %s, 'tacit/notes', 'notes', %s) RETURNING id""",
            (tenant_id, user_id, " ".join(texts)),
        ).fetchone()
        assert memory is not None
        ids = []
        for index, text in enumerate(texts):
            row = conn.execute(
                """INSERT INTO memory_chunks (tenant_id, user_id, memory_id, chunk_index, text, content_hash)
                   VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""",
                (tenant_id, user_id, memory["id"], index, text, content_hash(text)),
            ).fetchone()
            assert row is not None
            ids.append(int(row["id"]))
    return ids


def _chunk_dims() -> list[int | None]:
    with db.connection() as conn:
        rows = conn.execute("SELECT vector_dims(embedding) AS dims FROM memory_chunks ORDER BY id").fetchall()
    return [row["dims"] for row in rows]


# --- cache ---------------------------------------------------------------------------------------------


def test_cache_embeds_each_text_once() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    with db.connection() as conn:
        first = embed_texts(conn, embedder, ["apple pie", "banana split", "apple pie"], batch_size=8)
    assert sorted(embedder.embedded) == ["apple pie", "banana split"]  # duplicates within a call collapse
    assert first[0] == first[2]
    assert first[0] == pytest.approx(fake_embedding("apple pie", 16), abs=1e-6)

    embedder.calls.clear()
    with db.connection() as conn:
        second = embed_texts(conn, embedder, ["banana split", "cherry tart", "apple pie"], batch_size=8)
    assert embedder.calls == [["cherry tart"]]  # only the miss
    assert second[0] == pytest.approx(first[1], abs=1e-6)
    assert second[2] == pytest.approx(first[0], abs=1e-6)
    assert second[1] == pytest.approx(fake_embedding("cherry tart", 16), abs=1e-6)

    # Another dimension of the same model is another cache entry.
    other = CountingEmbedder("hash-16", 8)
    with db.connection() as conn:
        embed_texts(conn, other, ["apple pie"], batch_size=8)
        count = conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()
    assert other.calls == [["apple pie"]]
    assert count is not None and count["n"] == 4


def test_misses_are_embedded_in_batches() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    texts = [f"text number {i}" for i in range(5)]
    with db.connection() as conn:
        vectors = embed_texts(conn, embedder, texts, batch_size=2)
    assert [len(call) for call in embedder.calls] == [2, 2, 1]
    assert sorted(embedder.embedded) == sorted(texts)
    for text, vector in zip(texts, vectors, strict=True):  # input order, whatever the batch order
        assert vector == pytest.approx(fake_embedding(text, 16), abs=1e-6)


def test_hits_refresh_last_used_and_stale_rows_are_evicted() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    with db.connection() as conn:
        embed_texts(conn, embedder, ["kept", "forgotten"], batch_size=8)
        conn.execute("UPDATE embedding_cache SET last_used_at = now() - interval '40 days'")
    with db.connection() as conn:
        embed_texts(conn, embedder, ["kept"], batch_size=8)
    with db.connection() as conn:
        assert evict_stale(conn, older_than_days=30) == 1
        rows = conn.execute(
            "SELECT model, content_hash, last_used_at > now() - interval '1 minute' AS fresh FROM embedding_cache"
        ).fetchall()
    assert [(r["model"], r["content_hash"], r["fresh"]) for r in rows] == [
        (cache_model(embedder), content_hash("kept"), True)
    ]


# --- the embedding space -------------------------------------------------------------------------------


def test_first_embedder_fixes_the_space_and_another_is_refused() -> None:
    minilm = CountingEmbedder("all-MiniLM-L6-v2", 16)
    with db.connection() as conn:
        assert current_space(conn) is None
        assert not vector_search_available(conn)
        ensure_embedding_space(conn, minilm)
        ensure_embedding_space(conn, minilm)  # idempotent
    with db.connection() as conn:
        space = current_space(conn)
        assert space is not None
        assert (space["provider"], space["model"], space["dimension"], space["status"]) == (
            "test",
            "all-MiniLM-L6-v2",
            16,
            "ready",
        )
        assert vector_search_available(conn)
    assert _column_dimension() == 16
    assert _index_exists()

    other = CountingEmbedder("text-embedding-3-small", 24)
    with db.connection() as conn, pytest.raises(EmbeddingSpaceMismatch) as caught:
        ensure_embedding_space(conn, other)
    message = str(caught.value)
    assert "test/all-MiniLM-L6-v2 (16 dims)" in message
    assert "test/text-embedding-3-small (24 dims)" in message
    assert "engram reindex" in message
    assert minilm.calls == [] and other.calls == []  # checking the space embeds nothing


def test_an_embedding_pass_with_nothing_to_embed_leaves_the_model_to_the_first_write() -> None:
    # The beat's embedding pass over a new, empty database (right after `engram up`) records no space: a model
    # configured before the first memory is written is taken without a reindex.
    default = CountingEmbedder("hash-16", 16)
    assert index_pending_memories(default, 8) == PendingBatch(0, 0, more=False)
    assert embed_pending_units(default, 8) == UnitBatch(0, more=False)
    with db.connection() as conn:
        assert current_space(conn) is None
        store_memory(conn, make_scope(conn), MemoryInput(key="drink", value="I like green tea"), "api")
    chosen = CountingEmbedder("hash-24", 24)
    assert index_pending_memories(chosen, 8).memories == 1
    with db.connection() as conn:
        space = current_space(conn)
    assert space is not None and (space["model"], space["dimension"]) == ("hash-24", 24)
    assert default.calls == [] and len(chosen.calls) == 1


def test_space_is_recreated_after_tables_are_truncated() -> None:
    # What tests/conftest.py does between tests: rows go, the column keeps its vector(n) type.
    with db.connection() as conn:
        ensure_embedding_space(conn, CountingEmbedder("hash-16", 16))
    with db.connection() as conn:
        conn.execute("TRUNCATE embedding_space")
    forget_checked_spaces()

    with db.connection() as conn:
        ensure_embedding_space(conn, CountingEmbedder("hash-24", 24))
        space = current_space(conn)
    assert space is not None and (space["model"], space["dimension"]) == ("hash-24", 24)
    assert _column_dimension() == 24
    assert _index_exists()


def test_space_set_up_in_a_rolled_back_transaction_is_set_up_again() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    with pytest.raises(RuntimeError, match="caller failed"), db.connection() as conn:
        ensure_embedding_space(conn, embedder)
        raise RuntimeError("caller failed")
    with db.connection() as conn:
        assert current_space(conn) is None
        ensure_embedding_space(conn, embedder)  # not skipped on the strength of the rolled-back setup
    with db.connection() as conn:
        assert vector_search_available(conn)


def test_vectors_of_unknown_origin_are_not_adopted() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    (chunk_id,) = _insert_chunks(["an orphaned vector"])
    with db.connection() as conn:
        ensure_embedding_space(conn, embedder)
        vector = embed_texts(conn, embedder, ["an orphaned vector"], batch_size=8)[0]
        conn.execute("UPDATE memory_chunks SET embedding = %s::float4[]::vector WHERE id = %s", (vector, chunk_id))
        conn.execute("DELETE FROM embedding_space")
    forget_checked_spaces()

    # Same dimension, but nothing says which model made the stored vector.
    with db.connection() as conn, pytest.raises(EmbeddingSpaceMismatch, match="engram reindex"):
        ensure_embedding_space(conn, embedder)
    with db.connection() as conn:
        assert current_space(conn) is None  # nothing was half-done

    assert reindex(db.connection, embedder, batch_size=8) == 1
    with db.connection() as conn:
        ensure_embedding_space(conn, embedder)
        assert vector_search_available(conn)
    assert _chunk_dims() == [16]


# --- reindex ---------------------------------------------------------------------------------------------


def test_reindex_switches_the_space_and_is_restartable() -> None:
    old = CountingEmbedder("hash-16", 16)
    texts = ["alpha beta", "gamma delta", "epsilon", "zeta eta theta", "iota"]
    _insert_chunks(texts)
    with db.connection() as conn:
        ensure_embedding_space(conn, old)
        vectors = embed_texts(conn, old, texts, batch_size=8)
        for text, vector in zip(texts, vectors, strict=True):
            conn.execute("UPDATE memory_chunks SET embedding = %s::float4[]::vector WHERE text = %s", (vector, text))
    assert _chunk_dims() == [16] * 5

    # The new model crashes after its first batch of two.
    crashing = CountingEmbedder("hash-24", 24, fail_after_calls=1)
    progress: list[tuple[int, int]] = []
    with pytest.raises(RuntimeError, match="simulated crash"):
        reindex(db.connection, crashing, batch_size=2, progress=lambda done, total: progress.append((done, total)))
    assert progress == [(0, 5), (2, 5)]
    with db.connection() as conn:
        space = current_space(conn)
        assert space is not None and (space["model"], space["dimension"], space["status"]) == (
            "hash-24",
            24,
            "reindexing",
        )
        assert not vector_search_available(conn)  # searches fall back to full text meanwhile
    assert sorted(_chunk_dims(), key=lambda d: d or 0) == [None, None, None, 24, 24]
    assert not _index_exists()
    assert _column_dimension() == 24

    # The old model is refused now; the new one may write while the reindex is unfinished.
    with db.connection() as conn, pytest.raises(EmbeddingSpaceMismatch, match="reindex in progress"):
        ensure_embedding_space(conn, old)
    forget_checked_spaces()

    # Run again: it resumes with the three chunks left and reuses nothing it does not need.
    fixed = CountingEmbedder("hash-24", 24)
    assert reindex(db.connection, fixed, batch_size=2) == 3
    assert sorted(fixed.embedded) == sorted(set(texts) - set(crashing.embedded))
    assert _chunk_dims() == [24] * 5
    assert _index_exists()
    with db.connection() as conn:
        space = current_space(conn)
        assert space is not None and space["status"] == "ready"
        assert vector_search_available(conn)
        ensure_embedding_space(conn, fixed)
        stored = conn.execute(
            "SELECT text, embedding::float4[] AS e FROM memory_chunks WHERE text = 'epsilon'"
        ).fetchone()
    assert stored is not None and stored["e"] == pytest.approx(fake_embedding("epsilon", 24), abs=1e-6)


def test_reindex_with_the_same_model_only_fills_gaps_through_the_cache() -> None:
    embedder = CountingEmbedder("hash-16", 16)
    texts = ["one", "two", "three"]
    _insert_chunks(texts)
    assert reindex(db.connection, embedder, batch_size=8) == 3  # no space yet: this sets it up
    with db.connection() as conn:
        conn.execute("UPDATE memory_chunks SET embedding = NULL WHERE text = 'two'")

    embedder.calls.clear()
    assert reindex(db.connection, embedder, batch_size=8) == 1
    assert embedder.calls == []  # "two" came from the cache
    assert _chunk_dims() == [16, 16, 16]
    assert _index_exists()


# --- a reindex in another process ------------------------------------------------------------------------
# Each process trusts its last space check for ENGRAM_EMBEDDING_SPACE_CHECK_SECONDS. These tests stand for a
# process whose check is that recent while `engram reindex` (elsewhere) switches the space to another model of
# the same dimension, where a vector of the wrong model fits the column and nothing else would notice it.


def _vectors_by_text() -> dict[str, list[float]]:
    with db.connection() as conn:
        rows = conn.execute("SELECT text, embedding::float4[] AS e FROM memory_chunks ORDER BY id").fetchall()
    return {row["text"]: row["e"] for row in rows}


def test_a_process_that_checked_the_space_before_a_reindex_elsewhere_stores_none_of_its_old_vectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = CountingEmbedder("hash-8", 8), MirroredEmbedder("hash-8-mirrored", 8)
    with db.connection() as conn:
        scope = make_scope(conn)
        store_memory(conn, scope, MemoryInput(key="pet", value="Alice has a golden retriever"), "api")
    assert index_pending_memories(old, 8).memories == 1
    assert reindex(db.connection, new, batch_size=8) == 1  # the other process

    monkeypatch.setattr(space, "_recently_checked", lambda key: True)  # this one still trusts its old check
    with db.connection() as conn:
        store_memory(conn, scope, MemoryInput(key="job", value="works night shifts as a nurse"), "api")
    with pytest.raises(SpaceChanged, match="changed to test/hash-8-mirrored"):
        index_pending_memories(old, 8)
    # Nothing was written: the memory is still pending, and every stored vector is the new model's.
    with db.connection() as conn:
        pending = conn.execute("SELECT key FROM memories WHERE embedded_at IS NULL").fetchall()
    assert [row["key"] for row in pending] == ["job"]
    stored = _vectors_by_text()
    assert len(stored) == 1
    assert all(vector == pytest.approx(new.embed([text])[0], abs=1e-6) for text, vector in stored.items())

    # Its retry, with the model the database now records, embeds it.
    assert index_pending_memories(new, 8).memories == 1
    stored = _vectors_by_text()
    assert len(stored) == 2
    assert all(vector == pytest.approx(new.embed([text])[0], abs=1e-6) for text, vector in stored.items())


def test_a_search_with_a_model_the_database_no_longer_records_runs_without_vectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = CountingEmbedder("hash-8", 8), MirroredEmbedder("hash-8-mirrored", 8)
    _insert_chunks(["alpha"])
    assert reindex(db.connection, new, batch_size=8) == 1
    monkeypatch.setattr(space, "_recently_checked", lambda key: True)  # a check of the old model, still trusted
    monkeypatch.setattr(service, "process_embedder", lambda: old)
    service.forget_recent_queries()
    with db.connection() as conn:
        rows = conn.execute(*SPACE_QUERY).fetchall()  # as a search reads it, along with its other reads
        # The old model's query vector would rank the new model's vectors at random: no vector leg instead.
        assert service.query_vector(conn, "who has a dog?", rows) is None
    monkeypatch.setattr(service, "process_embedder", lambda: new)
    with db.connection() as conn:
        rows = conn.execute(*SPACE_QUERY).fetchall()
        assert service.query_vector(conn, "who has a dog?", rows) == pytest.approx(new.embed(["who has a dog?"])[0])
    service.forget_recent_queries()


def test_a_reindex_waits_for_a_vector_write_in_flight_then_re_embeds_what_it_wrote() -> None:
    old, new = CountingEmbedder("hash-8", 8), MirroredEmbedder("hash-8-mirrored", 8)
    _insert_chunks(["alpha", "beta"])
    with db.connection() as conn:
        ensure_embedding_space(conn, old)
        # A reindex to the old model was interrupted: the next one goes straight to the switch.
        conn.execute("UPDATE embedding_space SET status = 'reindexing'")
    outcome: dict[str, Any] = {}

    def run_reindex() -> None:
        try:
            outcome["embedded"] = reindex(db.connection, new, batch_size=8)
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    with db.connect() as writer:
        hold_space_for_write(writer, old)  # a writer's transaction, between its check and its write
        thread = threading.Thread(target=run_reindex, daemon=True)
        thread.start()
        with db.connect(autocommit=True) as watcher:
            waiting = threading.Event()
            for _ in range(3000):
                row = watcher.execute(
                    """SELECT count(*) AS n FROM pg_stat_activity
                        WHERE wait_event_type = 'Lock' AND datname = current_database()
                          AND query LIKE 'INSERT INTO embedding_space%'"""
                ).fetchone()
                if (row is not None and row["n"] > 0) or not thread.is_alive():
                    waiting.set()
                    break
                waiting.wait(0.01)
        assert waiting.is_set() and thread.is_alive(), outcome  # the reindex waits for the writer
        # Taking the space row before the table, the reindex lets the write through instead of deadlocking.
        writer.execute(
            "UPDATE memory_chunks SET embedding = %s::float4[]::vector WHERE text = 'alpha'", (old.embed(["alpha"])[0],)
        )
        writer.commit()
    thread.join(timeout=60)
    assert not thread.is_alive() and "error" not in outcome, outcome
    assert outcome["embedded"] == 2  # the old vector the writer stored was cleared and made again
    stored = _vectors_by_text()
    assert all(vector == pytest.approx(new.embed([text])[0], abs=1e-6) for text, vector in stored.items())
