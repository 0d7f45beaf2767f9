"""Query vectors: embedded without the embedding cache, repeats served from a per-process memo, models never mixed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared.embeddings.space import forget_checked_spaces
from shared.infra.db import connect
from shared.memory import service
from tests.conftest import TestServices


class Stub:
    provider = "stub"
    dimension = 3

    def __init__(self, model: str, vector: list[float]) -> None:
        self.model, self.vector, self.calls = model, vector, 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [list(self.vector) for _ in texts]


def use(monkeypatch: pytest.MonkeyPatch, embedder: Stub) -> None:
    monkeypatch.setattr(service, "process_embedder", lambda: embedder)


def test_queries_bypass_the_embedding_cache_and_repeats_are_not_embedded_again(
    clean_state: TestServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Stub("a", [1.0, 0.0, 0.0])
    use(monkeypatch, first)
    with connect(clean_state.database_url) as conn:
        service.ensure_embedding_space(conn, first)
        assert service.query_vector(conn, "where does Ann live?") == [1.0, 0.0, 0.0]
        # No cache row for a query: no round trips for it, and nothing left behind once it is answered.
        row = conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()
        assert row is not None and row["n"] == 0
        again = service.query_vector(conn, "where does Ann live?")
        assert again == [1.0, 0.0, 0.0]
        assert first.calls == 1  # served from the process's memo
        again[0] = 9.0  # a caller changing its vector does not change the next caller's
        assert service.query_vector(conn, "where does Ann live?") == [1.0, 0.0, 0.0]


def test_a_changed_model_never_gets_the_old_models_vector(
    clean_state: TestServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = Stub("a", [1.0, 0.0, 0.0]), Stub("b", [0.0, 1.0, 0.0])
    with connect(clean_state.database_url) as conn:
        use(monkeypatch, old)
        service.ensure_embedding_space(conn, old)
        assert service.query_vector(conn, "where does Ann live?") == [1.0, 0.0, 0.0]
        # The database moves to another model of the same size (as after `engram reindex` with no chunks).
        conn.execute("DELETE FROM embedding_space")
        forget_checked_spaces()
        use(monkeypatch, new)
        service.ensure_embedding_space(conn, new)
        assert service.query_vector(conn, "where does Ann live?") == [0.0, 1.0, 0.0]
        assert new.calls == 1
