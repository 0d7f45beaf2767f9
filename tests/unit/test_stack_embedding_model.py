"""`engram up` exports the default backend's ONNX model once, before it starts any process, into the
user's cache; later starts (and the torch backend) skip it; a failed export is a clear error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ops.stack import Stack, StackError
from shared.embeddings.providers import OnnxLocalEmbedder, int8_path, onnx_cache_name
from shared.infra.config import Settings


def _no_export(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"no export expected: {args}")


def test_first_start_exports_into_the_user_cache_and_later_starts_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    stack = Stack(Settings(_env_file=None, data_dir=tmp_path / "data"))
    target = tmp_path / "cache" / "engram" / "models" / onnx_cache_name()

    stack._prepare_embedding_model()

    assert target.is_file() and not list(target.parent.glob("*.partial"))
    assert len(OnnxLocalEmbedder(model_path=target).embed(["I love dogs"])[0]) == 384
    monkeypatch.setattr(subprocess, "run", _no_export)
    stack._prepare_embedding_model()  # a second start (or another data dir) reuses the export
    Stack(Settings(_env_file=None, data_dir=tmp_path / "other"))._prepare_embedding_model()


def test_the_torch_backend_and_remote_embeddings_export_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(subprocess, "run", _no_export)
    Stack(Settings(_env_file=None, data_dir=tmp_path, embedding_backend="torch"))._prepare_embedding_model()
    Stack(Settings(_env_file=None, data_dir=tmp_path, embedding_provider="openai"))._prepare_embedding_model()
    assert not (tmp_path / "cache").exists()


def test_an_export_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    target = tmp_path / "a-file" / "minilm.onnx"
    stack = Stack(Settings(_env_file=None, data_dir=tmp_path, embedding_onnx_path=target))
    with pytest.raises(StackError) as raised:
        stack._prepare_embedding_model()
    message = str(raised.value)
    assert f"could not export the embedding model to {target}" in message
    assert "ENGRAM_EMBEDDING_ONNX_PATH" in message and "Traceback" not in message
    assert not target.exists()


def test_the_int8_backend_gets_its_quantized_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    stack = Stack(Settings(_env_file=None, data_dir=tmp_path / "data", embedding_backend="onnx-int8"))
    fp32 = tmp_path / "cache" / "engram" / "models" / onnx_cache_name()

    stack._prepare_embedding_model()

    assert int8_path(fp32).is_file() and not list(fp32.parent.glob("*.partial"))
    embedder = OnnxLocalEmbedder(model_path=fp32, int8=True)
    assert len(embedder.embed(["I love dogs"])[0]) == 384
    monkeypatch.setattr(subprocess, "run", _no_export)
    stack._prepare_embedding_model()  # the next start reuses it
