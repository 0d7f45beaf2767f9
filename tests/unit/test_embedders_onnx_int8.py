"""ENGRAM_EMBEDDING_BACKEND=onnx-int8: the bundled MiniLM with int8 weights, quantized once from the fp32
export into the same cache directory (atomically, reused afterwards), giving normalised 384-dim vectors
close to fp32's, under its own model name (another embedding space)."""

from __future__ import annotations

import importlib.metadata
import math
import subprocess
import sys
from pathlib import Path

import pytest

from shared.adapters.embeddings import minilm_onnx
from shared.embeddings.providers import (
    LOCAL_DIMENSION,
    LOCAL_INT8_MODEL,
    LOCAL_MODEL,
    OnnxLocalEmbedder,
    embedder_from_settings,
    export_local_onnx,
    int8_path,
    onnx_cache_name,
)
from shared.infra.config import Settings
from tests.support.embedding_texts import EDGE_TEXTS

TEXTS = [
    *EDGE_TEXTS,
    "Caroline: I'm looking into adoption agencies. Melanie: That's wonderful, how far along are you? "
    "Caroline: Just researching for now, I want to give a kid a loving home like I never had.",
]
# Lowest cosine between an int8 and an fp32 vector accepted here. Measured on 200 LoCoMo dev turns: min
# 0.9851, mean 0.9926 (python -m ops.bench.embedders --backends onnx,onnx-int8); texts with next to no
# content ("ok": 0.960) deviate most. One scale per tensor instead of per channel gave a min of 0.92 on
# context windows, and reduce_range 0.70, which this bound rejects.
INT8_MIN_COSINE = 0.95
INT8_MEAN_COSINE = 0.98


@pytest.fixture(scope="module")
def fp32_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_local_onnx(tmp_path_factory.mktemp("onnx") / "minilm.onnx")


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def test_int8_vectors_are_normalised_384_dim_close_to_fp32_in_input_order(fp32_path: Path) -> None:
    int8 = OnnxLocalEmbedder(model_path=fp32_path, int8=True).embed(TEXTS)
    fp32 = OnnxLocalEmbedder(model_path=fp32_path).embed(TEXTS)

    assert int8_path(fp32_path).is_file()
    assert len(int8) == len(TEXTS) and all(len(v) == LOCAL_DIMENSION for v in int8)
    assert all(math.hypot(*v) == pytest.approx(1.0, abs=1e-5) for v in int8)
    cosines = [_cosine(a, b) for a, b in zip(int8, fp32, strict=True)]
    assert min(cosines) > INT8_MIN_COSINE, cosines
    assert sum(cosines) / len(cosines) > INT8_MEAN_COSINE, cosines
    # Not the fp32 model under another name: the vectors really differ (beyond fp32-vs-torch's 1e-6).
    assert min(cosines) < 0.9999
    assert _cosine(int8[0], int8[2]) < 0.5  # different texts still differ


def test_int8_is_quantized_once_next_to_the_export_and_reused(
    fp32_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models = tmp_path / "cache" / "engram" / "models"
    models.mkdir(parents=True)
    (models / onnx_cache_name()).write_bytes(fp32_path.read_bytes())  # an earlier fp32 export on this machine
    quantized: list[Path] = []
    real = minilm_onnx.quantize_local_onnx

    def counting(source: Path, target: Path) -> Path:
        quantized.append(target)
        return real(source, target)

    monkeypatch.setattr(minilm_onnx, "quantize_local_onnx", counting)
    monkeypatch.setattr(minilm_onnx, "export_local_onnx", lambda target: pytest.fail("the fp32 export exists"))
    embedder = embedder_from_settings(Settings(_env_file=None, embedding_backend="onnx-int8", data_dir=tmp_path))
    assert isinstance(embedder, OnnxLocalEmbedder)
    ort = importlib.metadata.version("onnxruntime")
    target = models / f"{Path(onnx_cache_name()).stem}-int8-onnxruntime-{ort}.onnx"
    assert embedder.run_path == target and not target.exists()

    (first,) = embedder.embed(["I love dogs"])
    assert quantized == [target] and target.is_file() and not list(models.glob("*.partial"))

    # Another process (its own session cache) loads the file instead of quantizing again.
    minilm_onnx._onnx_sessions.clear()
    (again,) = embedder_from_settings(Settings(_env_file=None, embedding_backend="onnx-int8")).embed(["I love dogs"])
    assert quantized == [target]
    assert again == first


def test_a_failed_quantization_leaves_no_file_and_the_next_try_makes_it(
    fp32_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "minilm.onnx"
    source.write_bytes(fp32_path.read_bytes())
    import onnxruntime.quantization

    real = onnxruntime.quantization.quantize_dynamic

    def crash(model_input: object, model_output: Path, **kw: object) -> None:
        Path(model_output).write_bytes(b"half a model")
        raise RuntimeError("killed mid-quantization")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", crash)
    with pytest.raises(RuntimeError, match="killed mid-quantization"):
        OnnxLocalEmbedder(model_path=source, int8=True).embed(["I love dogs"])
    assert sorted(tmp_path.iterdir()) == [source]  # no partial file, nothing a later process could load

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", real)
    (vector,) = OnnxLocalEmbedder(model_path=source, int8=True).embed(["I love dogs"])
    assert sorted(tmp_path.iterdir()) == sorted([source, int8_path(source)]) and len(vector) == LOCAL_DIMENSION


def test_int8_is_its_own_embedding_space_and_torch_onnx_share_one(tmp_path: Path) -> None:
    def identity(backend: str) -> tuple[str, str, int]:
        e = embedder_from_settings(Settings(_env_file=None, embedding_backend=backend, embedding_onnx_path=tmp_path))
        return (e.provider, e.model, e.dimension)

    assert identity("onnx-int8") == ("local", LOCAL_INT8_MODEL, 384)
    assert identity("onnx") == identity("torch") == ("local", LOCAL_MODEL, 384)
    assert LOCAL_INT8_MODEL != LOCAL_MODEL


def test_prepare_command_makes_only_the_missing_int8_file(fp32_path: Path, tmp_path: Path) -> None:
    """What `engram up` runs in a child process for the int8 backend when the fp32 export already exists."""
    source = tmp_path / "minilm.onnx"
    source.write_bytes(fp32_path.read_bytes())
    before = source.stat().st_mtime_ns
    command = [sys.executable, "-m", "shared.embeddings.providers", "prepare", str(source), "int8"]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(int8_path(source))
    assert sorted(tmp_path.iterdir()) == sorted([source, int8_path(source)])
    assert source.stat().st_mtime_ns == before  # the fp32 export was not made again
    bad = subprocess.run(
        [sys.executable, "-m", "shared.embeddings.providers", "prepare", str(source), "int4"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "usage:" in bad.stderr and "Traceback" not in bad.stderr


def test_an_int8_vector_does_not_depend_on_the_texts_embedded_with_it(fp32_path: Path) -> None:
    """Activations are quantized with one scale per model run: batched with other texts, a text's vector
    would change (cosine 0.991), and the cache, reindex and dedup all assume one text gives one vector."""
    embedder = OnnxLocalEmbedder(model_path=fp32_path, int8=True)
    alone = embedder.embed([TEXTS[7]])[0]
    for batch in (TEXTS, [TEXTS[4], TEXTS[7]], [TEXTS[7], "ok"]):
        assert embedder.embed(batch)[batch.index(TEXTS[7])] == pytest.approx(alone, abs=1e-6)


def test_the_default_backend_makes_int8_and_follows_a_recorded_fp32_space_back_and_forth(fp32_path: Path) -> None:
    embedder = embedder_from_settings(Settings(_env_file=None, embedding_onnx_path=fp32_path))
    assert isinstance(embedder, OnnxLocalEmbedder) and embedder.follows_space
    assert (embedder.model, embedder.run_path) == (LOCAL_INT8_MODEL, int8_path(fp32_path))
    (int8,) = embedder.embed(["I love dogs"])

    assert embedder.follow(LOCAL_MODEL, LOCAL_DIMENSION)
    assert (embedder.model, embedder.run_path) == (LOCAL_MODEL, fp32_path)
    (fp32,) = embedder.embed(["I love dogs"])
    assert fp32 == pytest.approx(OnnxLocalEmbedder(model_path=fp32_path).embed(["I love dogs"])[0], abs=1e-6)
    assert fp32 != pytest.approx(int8, abs=1e-3)  # it really runs the other model now

    assert embedder.follow(LOCAL_INT8_MODEL, LOCAL_DIMENSION)
    assert embedder.embed(["I love dogs"]) == [int8]


def test_no_embedder_follows_a_space_it_cannot_make_and_explicit_backends_never_follow(fp32_path: Path) -> None:
    default = embedder_from_settings(Settings(_env_file=None, embedding_onnx_path=fp32_path))
    assert isinstance(default, OnnxLocalEmbedder)
    assert not default.follow("text-embedding-3-small", 1536)
    assert not default.follow(LOCAL_MODEL, 16)  # a local model's name with another dimension is not ours
    assert default.model == LOCAL_INT8_MODEL

    for backend, model in (("onnx", LOCAL_MODEL), ("onnx-int8", LOCAL_INT8_MODEL)):
        explicit = embedder_from_settings(
            Settings(_env_file=None, embedding_backend=backend, embedding_onnx_path=fp32_path)
        )
        assert isinstance(explicit, OnnxLocalEmbedder) and not explicit.follows_space
        other = LOCAL_INT8_MODEL if model == LOCAL_MODEL else LOCAL_MODEL
        assert not explicit.follow(other, LOCAL_DIMENSION)
        assert explicit.model == model
