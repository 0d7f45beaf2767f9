"""What every `engram` command shares: failing with a message, reading the settings, a transaction, a tenant."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn

import typer

from shared.config import Settings, get_settings
from shared.db import Conn

TenantOption = Annotated[str, typer.Option(help="The tenant (by name)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object")]


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


@contextmanager
def transaction() -> Iterator[Conn]:
    """One committed transaction for a command; unconfigured services are a message, not a traceback."""
    from shared.db import connect
    from shared.services import ServiceNotConfigured

    load_settings()
    try:
        with connect() as conn:
            yield conn
            conn.commit()
    except ServiceNotConfigured as exc:
        fail(str(exc))


def require_tenant(conn: Conn, tenant: str, create: bool = False) -> int:
    """The tenant's id by name (created when `create`); an unknown one ends the command."""
    from shared.auth import ensure_tenant
    from shared.keys import tenant_id_of

    found = ensure_tenant(conn, tenant) if create else tenant_id_of(conn, tenant)
    if found is None:
        fail(f"no tenant {tenant!r}")
    return found
