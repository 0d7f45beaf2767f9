"""The query path's in-process memo of query vectors: repeats skip the embedding cache, models never mix."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared.db import connect
from shared.embeddings.space import forget_checked_spaces
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


def test_a_repeated_query_skips_the_embedding_cache(clean_state: TestServices, monkeypatch: pytest.MonkeyPatch) -> None:
    first = Stub("a", [1.0, 0.0, 0.0])
    use(monkeypatch, first)
    with connect(clean_state.database_url) as conn:
        service.ensure_embedding_space(conn, first)
        assert service.query_vector(conn, "where does Ann live?") == [1.0, 0.0, 0.0]
        conn.execute("DELETE FROM embedding_cache")
        again = service.query_vector(conn, "where does Ann live?")
        assert again == [1.0, 0.0, 0.0]
        # Served from memory: not embedded again, and no round trip re-filled the cache.
        assert first.calls == 1
        assert conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()["n"] == 0
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
