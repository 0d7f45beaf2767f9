"""What every `engram` command shares: failing with a message, reading the settings, a transaction, a tenant."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn

import typer

from shared.infra.config import Settings, get_settings
from shared.infra.db import Conn

TenantOption = Annotated[str, typer.Option(help="The tenant (by name)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
UrlOpt = Annotated[str | None, typer.Option(help="Gateway URL (default http://ENGRAM_HOST:ENGRAM_PORT)")]
KeyOpt = Annotated[str | None, typer.Option(help="API key (default ENGRAM_API_KEY or the dev key)")]


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
    from shared.infra.db import connect
    from shared.infra.secretbox import SecretKeyError
    from shared.infra.services import ServiceNotConfigured

    load_settings()
    try:
        with connect() as conn:
            yield conn
            conn.commit()
    except (ServiceNotConfigured, SecretKeyError) as exc:  # no key, or one that does not open the stored secrets
        fail(str(exc))


def require_tenant(conn: Conn, tenant: str, create: bool = False) -> int:
    """The tenant's id by name (created when `create`); an unknown one ends the command."""
    from shared.access.auth import ensure_tenant
    from shared.access.keys import tenant_id_of

    found = ensure_tenant(conn, tenant) if create else tenant_id_of(conn, tenant)
    if found is None:
        fail(f"no tenant {tenant!r}")
    return found


def client_args(settings: Settings, url: str | None, api_key: str | None) -> tuple[str, str]:
    """The gateway's URL and the API key a command that talks to it uses: the options, else the environment,
    else the local stack's (`engram up`) address and dev key."""
    base = url or os.environ.get("ENGRAM_URL") or f"http://{settings.host}:{settings.port}"
    key = api_key or os.environ.get("ENGRAM_API_KEY")
    if not key and settings.dev_key_file.exists():
        key = settings.dev_key_file.read_text().strip()
    if not key:
        fail(
            "no API key: pass --api-key, set ENGRAM_API_KEY, or start the stack "
            f"(`engram up` writes {settings.dev_key_file})"
        )
    return base, key
