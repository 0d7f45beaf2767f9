"""Switching ENGRAM_EMBEDDING_BACKEND between torch and onnx keeps the database's embedding space: vectors
written by one are searched with the other, no `engram reindex` needed. The int8 backend is another space:
refused until `engram reindex` re-embeds with it. The default (auto) records int8 for a new database and
keeps serving a database whose vectors the fp32 model made (an upgrade from an engram whose default was
fp32), reindex included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.adapters.embeddings import minilm_onnx
from shared.embeddings.providers import LocalEmbedder, OnnxLocalEmbedder, embedder_from_settings, export_local_onnx
from shared.embeddings.space import (
    EmbeddingSpaceMismatch,
    current_space,
    ensure_embedding_space,
    forget_checked_spaces,
    reindex,
)
from shared.infra import db
from shared.infra.config import Settings
from shared.memory import service
from shared.memory.indexing import index_memory
from shared.memory.memory_input import MemoryInput
from shared.memory.service import forget_recent_queries
from shared.memory.store import Scope, store_memory
from tests.integration.test_memory_store import make_scope
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

FACTS = {
    "pet": "Alice has a golden retriever called Biscuit",
    "job": "works as a nurse at the city hospital night shift",
    "food": "is allergic to peanuts",
}


@pytest.fixture(scope="module")
def onnx_embedder(tmp_path_factory: pytest.TempPathFactory) -> OnnxLocalEmbedder:
    return OnnxLocalEmbedder(model_path=export_local_onnx(tmp_path_factory.mktemp("onnx") / "minilm.onnx"))


@pytest.fixture(autouse=True)
def fresh_checks(no_shared_workers: None, clean_state: TestServices) -> Iterator[None]:
    """Spaces made here only: a shared worker left running would make the configured one (its drain checks the
    space before it looks for work) between the truncate and the test's own first write."""
    forget_checked_spaces()
    yield
    forget_checked_spaces()


def test_torch_space_accepts_the_onnx_backend_and_its_vectors_rank_alike(onnx_embedder: OnnxLocalEmbedder) -> None:
    torch = LocalEmbedder()
    onnx = onnx_embedder
    with db.connection() as conn:
        ensure_embedding_space(conn, torch)
    forget_checked_spaces()
    with db.connection() as conn:
        ensure_embedding_space(conn, onnx)  # raises EmbeddingSpaceMismatch if it were another space
        space = current_space(conn)
        assert space is not None and (space["model"], space["dimension"], space["status"]) == (
            "all-MiniLM-L6-v2",
            384,
            "ready",
        )
        # A stored torch vector is found by an onnx query vector in pgvector as by a torch one.
        docs = ["Melanie ran a charity race for mental health", "Caroline researched adoption agencies"]
        stored = torch.embed(docs)
        query = onnx.embed(["Who looked into adopting a child?"])[0]
        rows = conn.execute(
            "SELECT i, (%s::vector <=> v::vector) AS d FROM unnest(%s::text[], ARRAY[0, 1]) AS t(v, i) ORDER BY d",
            (str(query), [str(v) for v in stored]),
        ).fetchall()
    assert [row["i"] for row in rows] == [1, 0]


def _store_and_index(conn: db.Conn, embedder: OnnxLocalEmbedder | LocalEmbedder) -> Scope:
    scope = make_scope(conn)
    for key, value in FACTS.items():
        memory_id = int(store_memory(conn, scope, MemoryInput(key=key, value=value), "api").memory["id"])
        index_memory(conn, embedder, memory_id)
    return scope


def _default_embedder(onnx_embedder: OnnxLocalEmbedder) -> OnnxLocalEmbedder:
    """What a process with default settings embeds with (its model files: the module's export)."""
    embedder = embedder_from_settings(Settings(_env_file=None, embedding_onnx_path=onnx_embedder.model_path))
    assert isinstance(embedder, OnnxLocalEmbedder)
    return embedder


def test_memories_written_under_torch_are_found_after_an_upgrade_to_the_default_backend(
    onnx_embedder: OnnxLocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the upgrade: a process on the torch backend fixed the fp32 space and indexed the memories.
    with db.connection() as conn:
        scope = _store_and_index(conn, LocalEmbedder())
    # After it: a fresh process whose settings are the defaults, nothing re-embedded in between. A new
    # database would get the int8 model; this one keeps the fp32 space its vectors are in.
    forget_checked_spaces()
    forget_recent_queries()
    default = _default_embedder(onnx_embedder)
    assert default.model == "all-MiniLM-L6-v2-int8"
    monkeypatch.setattr(service, "process_embedder", lambda: default)
    with db.connection() as conn:
        # No word in common with the stored value: only the vector leg can find it.
        results = service.search_memories(conn, scope, "Who owns a dog?")
        space = current_space(conn)
    assert results and results[0].key == "pet" and "vector" in results[0].legs
    assert space is not None and (space["model"], space["status"]) == ("all-MiniLM-L6-v2", "ready")
    assert default.model == "all-MiniLM-L6-v2"
    # What it writes from now on is in that space: a new memory's vector is the fp32 model's.
    with db.connection() as conn:
        memory_id = int(store_memory(conn, scope, MemoryInput(key="car", value="drives a red van"), "api").memory["id"])
        index_memory(conn, default, memory_id)
        row = conn.execute(
            "SELECT text, embedding::float4[] AS e FROM memory_chunks WHERE memory_id = %s", (memory_id,)
        ).fetchone()
    assert row is not None and row["e"] == pytest.approx(onnx_embedder.embed([row["text"]])[0], abs=1e-5)


def test_a_new_database_on_the_default_backend_records_the_int8_model(onnx_embedder: OnnxLocalEmbedder) -> None:
    default = _default_embedder(onnx_embedder)
    with db.connection() as conn:
        _store_and_index(conn, default)
        space = current_space(conn)
        row = conn.execute("SELECT text, embedding::float4[] AS e FROM memory_chunks ORDER BY id LIMIT 1").fetchone()
    assert space is not None and (space["model"], space["status"]) == ("all-MiniLM-L6-v2-int8", "ready")
    int8 = OnnxLocalEmbedder(model_path=onnx_embedder.model_path, int8=True)
    assert row is not None and row["e"] == pytest.approx(int8.embed([row["text"]])[0], abs=1e-5)
    # An fp32 process configured explicitly is refused: the default does not make other settings follow.
    forget_checked_spaces()
    with db.connection() as conn, pytest.raises(EmbeddingSpaceMismatch):
        ensure_embedding_space(conn, onnx_embedder)


def test_reindex_on_the_default_backend_keeps_the_recorded_fp32_space(onnx_embedder: OnnxLocalEmbedder) -> None:
    with db.connection() as conn:
        _store_and_index(conn, onnx_embedder)
        before = conn.execute("SELECT id, embedding::text AS e FROM memory_chunks ORDER BY id").fetchall()
        # One chunk lost its vector (say an interrupted write): the reindex should make just that one.
        conn.execute("UPDATE memory_chunks SET embedding = NULL WHERE id = %s", (before[0]["id"],))
    default = _default_embedder(onnx_embedder)
    assert reindex(db.connection, default, batch_size=8) == 1
    with db.connection() as conn:
        space = current_space(conn)
        after = conn.execute("SELECT id, embedding::text AS e FROM memory_chunks ORDER BY id").fetchall()
    assert space is not None and (space["model"], space["status"]) == ("all-MiniLM-L6-v2", "ready")
    assert default.model == "all-MiniLM-L6-v2"
    assert [row["id"] for row in after] == [row["id"] for row in before]
    # The untouched vectors are as they were; the refilled one is the fp32 model's again.
    assert [row["e"] for row in after[1:]] == [row["e"] for row in before[1:]]
    assert after[0]["e"] is not None


def test_switching_to_the_int8_backend_is_refused_until_reindex_re_embeds_with_it(
    onnx_embedder: OnnxLocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Memories indexed on the fp32 onnx backend.
    with db.connection() as conn:
        scope = _store_and_index(conn, onnx_embedder)
    # Then ENGRAM_EMBEDDING_BACKEND=onnx-int8 (its file quantized from the same export).
    settings = Settings(_env_file=None, embedding_backend="onnx-int8", embedding_onnx_path=onnx_embedder.model_path)
    int8 = embedder_from_settings(settings)
    assert isinstance(int8, OnnxLocalEmbedder) and int8.model == "all-MiniLM-L6-v2-int8"
    forget_checked_spaces()
    with db.connection() as conn, pytest.raises(EmbeddingSpaceMismatch) as refused:
        ensure_embedding_space(conn, int8)
    assert "all-MiniLM-L6-v2 (384 dims)" in str(refused.value)
    assert "all-MiniLM-L6-v2-int8 (384 dims)" in str(refused.value)

    assert reindex(db.connection, int8, batch_size=settings.embedding_batch_size) >= len(FACTS)

    forget_checked_spaces()
    forget_recent_queries()
    monkeypatch.setattr(service, "process_embedder", lambda: int8)
    with db.connection() as conn:
        ensure_embedding_space(conn, int8)  # accepted now
        # Not the other tests' "Who owns a dog?": int8 scores it 0.421 against the pet (fp32 0.449), which
        # at the default vector weight 0.7 falls just under the default min score 0.3.
        results = service.search_memories(conn, scope, "Who has a dog?")
        space = current_space(conn)
        # Every chunk now holds an int8 vector: the stored one equals what int8 makes for its text.
        row = conn.execute("SELECT text, embedding::float4[] AS e FROM memory_chunks ORDER BY id LIMIT 1").fetchone()
    assert space is not None and (space["model"], space["status"]) == ("all-MiniLM-L6-v2-int8", "ready")
    assert results and results[0].key == "pet" and "vector" in results[0].legs
    assert row is not None and row["e"] == pytest.approx(int8.embed([row["text"]])[0], abs=1e-5)


def test_on_an_fp32_database_the_default_backend_warms_up_and_passes_doctor_as_fp32(
    onnx_embedder: OnnxLocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ops.doctor import _check_embeddings

    with db.connection() as conn:
        _store_and_index(conn, onnx_embedder)
    default = _default_embedder(onnx_embedder)
    int8_file = default.run_path
    minilm_onnx._onnx_sessions.pop(int8_file, None)
    monkeypatch.setattr(service, "process_embedder", lambda: default)
    # The gateway's start: it loads the model the database's vectors need, not the one a new database gets.
    service.warm_query_embedder()
    assert default.model == "all-MiniLM-L6-v2" and default.run_path in minilm_onnx._onnx_sessions
    assert int8_file not in minilm_onnx._onnx_sessions
    # `engram doctor` on default settings: the recorded fp32 space is what the default serves, not a mismatch.
    forget_checked_spaces()
    with db.connection() as conn:
        check = _check_embeddings(conn)
    assert check.ok and "all-MiniLM-L6-v2 (384 dims)" in check.detail, check
