"""`engram keys create|list|revoke|rotate`: API keys, straight against the database (no gateway needed)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ops.cli_support import JsonOption, TenantOption, fail, require_tenant, transaction
from shared.access.auth import SCOPES

keys_app = typer.Typer(help="Create, list, revoke and rotate API keys.", no_args_is_help=True)


def _public(record: dict[str, Any]) -> dict[str, Any]:
    fields = ("id", "name", "key_prefix", "scopes", "user_external_id", "created_at", "last_used_at", "revoked_at")
    out = {name: record[name] for name in fields}
    out["user_id"] = out.pop("user_external_id")
    out["scopes"] = list(out["scopes"])
    return {name: value.isoformat() if hasattr(value, "isoformat") else value for name, value in out.items()}


def _print_issued(key: str, record: dict[str, Any], tenant: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"key": key, "tenant": tenant, **_public(record)}))
        return
    typer.echo(key)
    bound = f", bound to user {record['user_external_id']!r}" if record["user_external_id"] else ""
    typer.echo(f"key {record['id']} of tenant {tenant!r}, scopes {','.join(record['scopes'])}{bound}", err=True)
    typer.echo("the key is shown only now: store it", err=True)


@keys_app.command("create")
def create(
    tenant: TenantOption = "default",
    name: Annotated[str, typer.Option(help="A label to tell keys apart")] = "cli",
    scopes: Annotated[
        str | None, typer.Option(help=f"Comma-separated: {', '.join(SCOPES)} (default: all but metrics)")
    ] = None,
    user: Annotated[str | None, typer.Option(help="Bind the key to this one user (external id)")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a key (the tenant is created if new); the key is printed once."""
    from shared.access.keys import KeyRequestInvalid, create_tenant_key

    try:
        with transaction() as conn:
            issued = create_tenant_key(conn, tenant, name=name, scopes=scopes, user_external_id=user)
    except KeyRequestInvalid as exc:
        fail(str(exc), 2)
    _print_issued(issued.key, issued.record, tenant, as_json)


@keys_app.command("list")
def list_keys(
    tenant: TenantOption = "default",
    include_revoked: Annotated[bool, typer.Option(help="Also list revoked keys")] = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's keys (never their secrets)."""
    from shared.access.keys import list_api_keys

    with transaction() as conn:
        rows = [
            _public(row) for row in list_api_keys(conn, require_tenant(conn, tenant), include_revoked=include_revoked)
        ]
    if as_json:
        typer.echo(json.dumps({"tenant": tenant, "keys": rows}))
        return
    for row in rows:
        state = f"revoked {row['revoked_at']}" if row["revoked_at"] else f"last used {row['last_used_at'] or 'never'}"
        bound = f" user={row['user_id']}" if row["user_id"] else ""
        typer.echo(f"{row['id']:>5}  {row['key_prefix']}…  {','.join(row['scopes'])}{bound}  {row['name']!r}  {state}")


@keys_app.command("revoke")
def revoke(key_id: int, tenant: TenantOption = "default", as_json: JsonOption = False) -> None:
    """Revoke a key: it stops working at once."""
    from shared.access.keys import revoke_api_key

    with transaction() as conn:
        record = revoke_api_key(conn, require_tenant(conn, tenant), key_id)
    if record is None:
        fail(f"tenant {tenant!r} has no active key {key_id}")
    typer.echo(json.dumps(_public(record)) if as_json else f"key {key_id} revoked")


@keys_app.command("rotate")
def rotate(key_id: int, tenant: TenantOption = "default", as_json: JsonOption = False) -> None:
    """Replace a key by a new secret with the same name, scopes and user; the old one stops working."""
    from shared.access.keys import rotate_api_key

    with transaction() as conn:
        issued = rotate_api_key(conn, require_tenant(conn, tenant), key_id)
    if issued is None:
        fail(f"tenant {tenant!r} has no active key {key_id}")
    _print_issued(issued.key, issued.record, tenant, as_json)
