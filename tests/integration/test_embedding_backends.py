"""Switching ENGRAM_EMBEDDING_BACKEND between torch and onnx keeps the database's embedding space: vectors
written by one are searched with the other, no `engram reindex` needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import db
from shared.embeddings.providers import LocalEmbedder, OnnxLocalEmbedder, export_local_onnx
from shared.embeddings.space import current_space, ensure_embedding_space, forget_checked_spaces
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def fresh_checks(clean_state: TestServices) -> Iterator[None]:
    forget_checked_spaces()
    yield
    forget_checked_spaces()


def test_torch_space_accepts_the_onnx_backend_and_its_vectors_rank_alike(tmp_path: Path) -> None:
    torch = LocalEmbedder()
    onnx = OnnxLocalEmbedder(model_path=export_local_onnx(tmp_path / "minilm.onnx"))
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
