""".env.example documents every setting and is exactly what `python -m ops.env_example` generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ops.env_example import render
from shared.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_env_example_is_generated_and_current() -> None:
    committed = (ROOT / ".env.example").read_text()
    assert committed == render(), "regenerate: python -m ops.env_example > .env.example"


def test_every_setting_is_in_env_example_and_nothing_else() -> None:
    names = re.findall(r"^# (ENGRAM_[A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M)
    assert names == [f"ENGRAM_{field.upper()}" for field in Settings.model_fields]


def test_a_setting_missing_from_the_readme_stops_the_generator() -> None:
    readme = (ROOT / "README.md").read_text()
    without = "\n".join(line for line in readme.splitlines() if not line.startswith("| `ENGRAM_PORT` |"))
    with pytest.raises(SystemExit, match="ENGRAM_PORT"):
        render(without)


def test_compose_variables_are_in_env_example() -> None:
    """Every variable docker-compose.yml interpolates is documented in the file users copy to `.env`."""
    example = (ROOT / ".env.example").read_text()
    compose = (ROOT / "docker-compose.yml").read_text()
    interpolated = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", compose))
    missing = {name for name in interpolated if f"# {name}=" not in example}
    assert not missing, sorted(missing)
