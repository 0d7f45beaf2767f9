"""What every `engram` command shares: failing with a message, and reading the settings."""

from __future__ import annotations

from typing import NoReturn

import typer

from shared.config import Settings, get_settings


def fail(message: str, code: int = 1) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def load_settings() -> Settings:
    from pydantic import ValidationError

    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(f"ENGRAM_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors())
        fail(f"invalid settings: {problems}", 2)
