""".env.example documents every setting and is exactly what `python -m ops.env_example` generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ops.env_example import plain, render
from shared.infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_env_example_is_generated_and_current() -> None:
    committed = (ROOT / ".env.example").read_text()
    assert committed == render(), "regenerate: python -m ops.env_example > .env.example"


def test_every_setting_is_in_env_example_and_nothing_else() -> None:
    names = re.findall(r"^# (ENGRAM_[A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M)
    assert names == [f"ENGRAM_{field.upper()}" for field in Settings.model_fields]


class _NoDescription(Settings):
    port: int = 8000  # no Field(description=...)


def test_a_setting_without_a_description_stops_the_generator() -> None:
    with pytest.raises(SystemExit, match="ENGRAM_PORT has no description"):
        render(_NoDescription.model_fields)


def test_env_example_says_what_the_settings_page_says() -> None:
    """Both are made from the same rows: each variable's meaning in `.env.example` is its row on the page."""
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    example = (ROOT / ".env.example").read_text()
    for name, meaning in re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \| .+? \| (.+) \|$", page, re.M):
        assert f"# {plain(meaning)}" in example, name


def test_compose_variables_are_in_env_example() -> None:
    """Every variable docker-compose.yml interpolates is documented in the file users copy to `.env`."""
    example = (ROOT / ".env.example").read_text()
    compose = (ROOT / "docker-compose.yml").read_text()
    interpolated = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", compose))
    missing = {name for name in interpolated if f"# {name}=" not in example}
    assert not missing, sorted(missing)
