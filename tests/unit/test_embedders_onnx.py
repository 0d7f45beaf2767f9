"""ENGRAM_EMBEDDING_BACKEND=onnx: the bundled MiniLM on onnxruntime gives torch's vectors, is selected by
settings, exports itself on first use, and reports the same embedding space (so no reindex)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from shared.config import Settings
from shared.embeddings.providers import (
    LOCAL_DIMENSION,
    LocalEmbedder,
    OnnxLocalEmbedder,
    embedder_from_settings,
    export_local_onnx,
)

TEXTS = [
    "I love dogs",
    "Caroline: I went to the LGBTQ support group yesterday [image: a poster with a rainbow flag]",
    "quarterly tax filing",
    "",
    "Melanie: pottery class on Saturdays, then a run by the lake " * 40,  # far past 256 tokens: truncated
    "naïve café — 東京 🙂",
    "ok",
]


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_local_onnx(tmp_path_factory.mktemp("onnx") / "minilm.onnx")


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def test_onnx_vectors_match_torch_in_input_order(onnx_path: Path) -> None:
    # batch_size 3 makes the length-sorted batches cross the input order, so a mix-up would show.
    onnx = OnnxLocalEmbedder(model_path=onnx_path, batch_size=3).embed(TEXTS)
    torch = LocalEmbedder().embed(TEXTS)

    assert len(onnx) == len(TEXTS) and all(len(v) == LOCAL_DIMENSION for v in onnx)
    assert all(math.hypot(*v) == pytest.approx(1.0, abs=1e-5) for v in onnx)
    for text, a, b in zip(TEXTS, onnx, torch, strict=True):
        assert _cosine(a, b) > 0.999, text
    # and not trivially: different texts still differ
    assert _cosine(onnx[0], onnx[2]) < 0.5
    assert OnnxLocalEmbedder(model_path=onnx_path).embed([]) == []


def test_settings_select_onnx_and_it_exports_on_first_use(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, embedding_backend="onnx", data_dir=tmp_path)
    embedder = embedder_from_settings(settings)
    assert isinstance(embedder, OnnxLocalEmbedder)
    target = tmp_path / "models" / "all-MiniLM-L6-v2.onnx"
    assert embedder.model_path == target and not target.exists()

    (vector,) = embedder.embed(["I love dogs"])

    assert target.is_file() and not list(target.parent.glob("*.partial"))
    assert _cosine(vector, LocalEmbedder().embed(["I love dogs"])[0]) > 0.999
    # Same provider/model/dimension as torch: the embedding-space check sees one space.
    torch = LocalEmbedder()
    assert (embedder.provider, embedder.model, embedder.dimension) == (torch.provider, torch.model, torch.dimension)


def test_backend_defaults_to_torch_and_rejects_unknown_values(tmp_path: Path) -> None:
    assert isinstance(embedder_from_settings(Settings(_env_file=None)), LocalEmbedder)
    explicit = Settings(_env_file=None, embedding_backend="onnx", embedding_onnx_path=tmp_path / "x.onnx")
    embedder = embedder_from_settings(explicit)
    assert isinstance(embedder, OnnxLocalEmbedder) and embedder.model_path == tmp_path / "x.onnx"
    with pytest.raises(pydantic.ValidationError, match="embedding_backend"):
        Settings(_env_file=None, embedding_backend="tensorflow")


def test_export_command_needs_a_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shared.embeddings.providers", "export"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "usage: python -m shared.embeddings.providers export" in done.stderr
    assert "Traceback" not in done.stderr
