"""Flower's login for `engram up`: generated once and kept (mode 600), or fixed by the settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ops.stack import ensure_flower_password
from shared.infra.config import Settings


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, **values)  # type: ignore[call-arg]


def test_generated_once_kept_private_and_reused(tmp_path: Path) -> None:
    first = ensure_flower_password(settings(tmp_path))
    stored = tmp_path / "flower-password"
    assert len(first) >= 20 and "," not in first and ":" not in first
    assert stored.read_text().strip() == first and stored.stat().st_mode & 0o777 == 0o600
    assert ensure_flower_password(settings(tmp_path)) == first


def test_the_setting_wins(tmp_path: Path) -> None:
    assert ensure_flower_password(settings(tmp_path, flower_password="chosen-one")) == "chosen-one"


@pytest.mark.parametrize(("field", "value"), [("flower_password", "a,b"), ("flower_user", "a:b"), ("flower_user", "")])
def test_values_flower_cannot_parse_are_refused(tmp_path: Path, field: str, value: str) -> None:
    # Flower reads FLOWER_BASIC_AUTH as comma-separated user:password pairs.
    with pytest.raises(ValidationError):
        settings(tmp_path, **{field: value})


def test_flower_binds_to_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    assert settings(tmp_path, host="0.0.0.0").flower_host == "127.0.0.1"
