"""Managing API keys: create, list, revoke, rotate. The CLI (`engram keys`) and the admin REST API
(`/v1/admin/keys`) both end here. A key's secret is returned once, by create and rotate; only its
hash and first characters are stored."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shared.access.auth import DEFAULT_SCOPES, SCOPES, ensure_tenant, generate_key, hash_key
from shared.infra.db import Conn

MAX_KEY_NAME_CHARS = 100
# The same shape as a user id anywhere in the API.
_USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$")
KEY_COLUMNS = """id, name, key_prefix, scopes, user_external_id, created_at, last_used_at, revoked_at,
    rotated_from"""


class KeyRequestInvalid(ValueError):
    """A key request that cannot be carried out as asked (unknown scope, bad user id, …); `field` names the
    request's field at fault (`name`, `scopes` or `user_id`), so a form can show the message beside it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class IssuedKey:
    key: str  # the secret: shown once, never stored
    record: dict[str, Any]


def parse_scopes(scopes: Iterable[str] | str | None) -> list[str]:
    """Scopes from a list or a comma-separated string, checked and de-duplicated in canonical order."""
    if scopes is None:
        return list(DEFAULT_SCOPES)
    items = scopes.split(",") if isinstance(scopes, str) else list(scopes)
    wanted = {item.strip() for item in items if item.strip()}
    if not wanted:
        raise KeyRequestInvalid(f"a key needs at least one scope: {', '.join(SCOPES)}", "scopes")
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        raise KeyRequestInvalid(
            f"unknown scope {', '.join(map(repr, unknown))}; scopes are {', '.join(SCOPES)}", "scopes"
        )
    return [scope for scope in SCOPES if scope in wanted]


def _check(name: str, user_external_id: str | None) -> None:
    if len(name) > MAX_KEY_NAME_CHARS:
        raise KeyRequestInvalid(f"key name is {len(name)} characters; the limit is {MAX_KEY_NAME_CHARS}", "name")
    if user_external_id is not None and not _USER_ID.match(user_external_id):
        raise KeyRequestInvalid(
            "user id must be 1-128 letters, digits and . _ : @ - (starting with a letter or digit)", "user_id"
        )


def _insert(
    conn: Conn, tenant_id: int, name: str, scopes: list[str], user_external_id: str | None, rotated_from: int | None
) -> IssuedKey:
    key = generate_key()
    row = conn.execute(
        f"""INSERT INTO api_keys (tenant_id, name, key_prefix, key_hash, scopes, user_external_id, rotated_from)
            VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {KEY_COLUMNS}""",
        (tenant_id, name, key[:10], hash_key(key), scopes, user_external_id, rotated_from),
    ).fetchone()
    assert row is not None
    return IssuedKey(key, row)


def create_api_key(
    conn: Conn,
    tenant_id: int,
    *,
    name: str = "",
    scopes: Iterable[str] | str | None = None,
    user_external_id: str | None = None,
) -> IssuedKey:
    checked = parse_scopes(scopes)
    _check(name, user_external_id)
    return _insert(conn, tenant_id, name, checked, user_external_id, None)


def create_tenant_key(conn: Conn, tenant_name: str, **options: Any) -> IssuedKey:
    """A key for a tenant given by name (created if new): what the CLI does."""
    return create_api_key(conn, ensure_tenant(conn, tenant_name), **options)


def tenant_id_of(conn: Conn, tenant_name: str) -> int | None:
    row = conn.execute("SELECT id FROM tenants WHERE name = %s", (tenant_name,)).fetchone()
    return int(row["id"]) if row else None


def list_api_keys(
    conn: Conn,
    tenant_id: int,
    *,
    include_revoked: bool = False,
    newest_first: bool = False,
    limit: int | None = None,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """The tenant's keys in id order (newest first if asked): all of them, or `limit` from `offset` on."""
    order = "id DESC" if newest_first else "id"
    return conn.execute(
        f"""SELECT {KEY_COLUMNS} FROM api_keys
            WHERE tenant_id = %s AND (%s OR revoked_at IS NULL) ORDER BY {order} LIMIT %s OFFSET %s""",
        (tenant_id, include_revoked, limit, offset),
    ).fetchall()


def revoke_api_key(conn: Conn, tenant_id: int, key_id: int) -> dict[str, Any] | None:
    """Revoke one of the tenant's keys; None when it has no such active key. Takes effect at once."""
    return conn.execute(
        f"""UPDATE api_keys SET revoked_at = now()
            WHERE tenant_id = %s AND id = %s AND revoked_at IS NULL RETURNING {KEY_COLUMNS}""",
        (tenant_id, key_id),
    ).fetchone()


def rotate_api_key(conn: Conn, tenant_id: int, key_id: int) -> IssuedKey | None:
    """A new secret with the same name, scopes and user; the old key is revoked in the same transaction."""
    old = revoke_api_key(conn, tenant_id, key_id)
    if old is None:
        return None
    return _insert(conn, tenant_id, old["name"], list(old["scopes"]), old["user_external_id"], old["id"])
