"""`engram doctor` on the local ONNX model file: there, to be made, or impossible to make where it is looked for."""

from __future__ import annotations

from pathlib import Path

from ops.doctor import _check_embedding_model_file
from shared.embeddings.providers import int8_path
from shared.infra.config import Settings


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def test_a_made_model_file_is_reported_with_its_path(tmp_path: Path) -> None:
    export = tmp_path / "minilm.onnx"
    export.write_bytes(b"model")
    check = _check_embedding_model_file(settings(embedding_onnx_path=export))
    assert check is not None and check.ok and str(export) in check.detail


def test_a_missing_file_that_can_be_made_names_the_command(tmp_path: Path) -> None:
    export = tmp_path / "models" / "minilm.onnx"
    check = _check_embedding_model_file(settings(embedding_onnx_path=export, embedding_backend="onnx-int8"))
    assert check is not None and check.ok
    assert "not made yet" in check.detail and str(int8_path(export)) in check.detail
    assert f"prepare {export} int8" in check.detail
    export.parent.mkdir()
    int8_path(export).write_bytes(b"model")  # the int8 backend needs its own file, not the export
    made = _check_embedding_model_file(settings(embedding_onnx_path=export, embedding_backend="onnx-int8"))
    assert made is not None and made.ok and "not made yet" not in made.detail


def test_a_file_that_cannot_be_made_there_fails_with_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    check = _check_embedding_model_file(settings(embedding_onnx_path=blocker / "minilm.onnx"))
    assert check is not None and not check.ok
    assert "cannot be written" in check.detail and "ENGRAM_EMBEDDING_ONNX_PATH" in check.fix


def test_backends_without_a_model_file_are_not_checked() -> None:
    assert _check_embedding_model_file(settings(embedding_backend="torch")) is None
    assert _check_embedding_model_file(settings(embedding_provider="openai", openai_api_key="k")) is None
