"""docs/reference/settings.md is exactly what `python -m ops.settings_doc` generates from the settings
object, and the generator refuses a setting without a description or a written-out default that is not
the object's."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from ops.settings_doc import render, rows, sections
from shared.infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_settings_page_is_generated_and_current() -> None:
    committed = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert committed == render(), "regenerate: python -m ops.settings_doc > docs/reference/settings.md"


def test_every_setting_has_a_row_with_its_variable_in_the_objects_order() -> None:
    assert [row.name for row in rows()] == [f"ENGRAM_{field.upper()}" for field in Settings.model_fields]


def test_every_setting_is_in_a_section_of_the_class() -> None:
    assert set(sections()) == set(Settings.model_fields)


def test_every_setting_has_a_description_and_it_is_the_rows_meaning() -> None:
    meanings = {row.name: row.meaning for row in rows()}
    for field, info in Settings.model_fields.items():
        assert info.description and info.description.strip(), field
        assert meanings[f"ENGRAM_{field.upper()}"] == info.description.strip()


def test_defaults_come_from_the_settings_object() -> None:
    shown = {row.name: row.default for row in rows()}
    assert shown["ENGRAM_PORT"] == "`8000`"
    assert shown["ENGRAM_LOG_JSON"] == "`false`"
    assert shown["ENGRAM_MAX_WAIT_SECONDS"] == "`60`"
    assert shown["ENGRAM_DATABASE_URL"] == "unset"
    assert shown["ENGRAM_DATA_DIR"] == "`~/.engram`"  # a default_factory: the field writes it out
    assert shown["ENGRAM_OTEL_SAMPLE_RATIO"] == "`1.0`"  # a spelling of the object's 1.0


class _NoDescription(Settings):
    port: int = 8000  # a field as one might add it, without Field(description=...)


class _BlankDescription(Settings):
    port: int = Field(8000, description="  ")


class _WrongDefault(Settings):
    port: int = Field(8000, description="gateway port", json_schema_extra={"doc_default": "`8080`"})


class _SpelledDefault(Settings):
    port: int = Field(8000, description="gateway port", json_schema_extra={"doc_default": "`8000.0`"})


@pytest.mark.parametrize("model", [_NoDescription, _BlankDescription])
def test_a_setting_without_a_description_stops_the_generator(model: type[Settings]) -> None:
    with pytest.raises(SystemExit, match="ENGRAM_PORT has no description"):
        render(model.model_fields)


def test_a_written_out_default_the_object_does_not_have_stops_the_generator() -> None:
    with pytest.raises(SystemExit, match=r"ENGRAM_PORT.*`8080`.*`8000`"):
        render(_WrongDefault.model_fields)
    assert "| `ENGRAM_PORT` | `8000.0` | gateway port |" in render(_SpelledDefault.model_fields)
