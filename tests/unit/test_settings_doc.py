"""docs/reference/settings.md is exactly what `python -m ops.settings_doc` generates from the settings
object, and the generator refuses a setting without a meaning or a default that is not the object's."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ops.settings_doc import MEANINGS, render, rows, sections
from shared.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def _meanings() -> dict[str, Any]:
    return tomllib.loads(MEANINGS.read_text())


def test_settings_page_is_generated_and_current() -> None:
    committed = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert committed == render(), "regenerate: python -m ops.settings_doc > docs/reference/settings.md"


def test_every_setting_has_a_row_with_its_variable_in_the_objects_order() -> None:
    assert [row.name for row in rows()] == [f"ENGRAM_{field.upper()}" for field in Settings.model_fields]


def test_every_setting_is_in_a_section_of_the_class() -> None:
    assert set(sections()) == set(Settings.model_fields)


def test_defaults_come_from_the_settings_object() -> None:
    shown = {row.name: row.default for row in rows()}
    assert shown["ENGRAM_PORT"] == "`8000`"
    assert shown["ENGRAM_LOG_JSON"] == "`false`"
    assert shown["ENGRAM_MAX_WAIT_SECONDS"] == "`60`"
    assert shown["ENGRAM_DATABASE_URL"] == "unset"


def test_a_setting_without_a_meaning_stops_the_generator() -> None:
    meanings = _meanings()
    del meanings["ENGRAM_PORT"]
    with pytest.raises(SystemExit, match="ENGRAM_PORT"):
        render(meanings)


def test_a_meaning_of_no_setting_stops_the_generator() -> None:
    meanings = _meanings()
    meanings["ENGRAM_NO_SUCH_SETTING"] = {"meaning": "gone"}
    with pytest.raises(SystemExit, match="ENGRAM_NO_SUCH_SETTING"):
        render(meanings)


def test_a_default_the_object_does_not_have_stops_the_generator() -> None:
    meanings = _meanings()
    meanings["ENGRAM_PORT"] = {"default": "`8080`", "meaning": "gateway port"}
    with pytest.raises(SystemExit, match="ENGRAM_PORT"):
        render(meanings)
    meanings["ENGRAM_OTEL_SAMPLE_RATIO"] = {"default": "`1.0`", "meaning": "a spelling of the same value"}
    meanings["ENGRAM_PORT"] = {"meaning": "gateway port"}
    assert "| `ENGRAM_OTEL_SAMPLE_RATIO` | `1.0` |" in render(meanings)
