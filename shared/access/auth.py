"""API keys: random secrets shown once, stored only as a sha256 hash, each bound to a tenant.

A key carries scopes (what it may do) and may be bound to one user of its tenant (what MCP and
browser-side clients need: a key that can only ever act for the person holding it).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from shared.infra.db import Conn

KEY_PREFIX = "egm_"
DEFAULT_TENANT = "default"


# What a key may do. `admin` implies every other scope; `metrics` is for Prometheus scrapers, which
# should hold no key that can read or change memory.
SCOPES = ("chat", "memory:read", "memory:write", "admin", "metrics")
ALL_SCOPES = frozenset(SCOPES)
DEFAULT_SCOPES = ("chat", "memory:read", "memory:write", "admin")


@dataclass(frozen=True)
class Tenant:
    id: int
    name: str


@dataclass(frozen=True)
class Principal(Tenant):
    """Who is calling: the key's tenant, the key, its scopes and the user it is bound to (if any)."""

    key_id: int = 0
    scopes: frozenset[str] = ALL_SCOPES
    user_external_id: str | None = None

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def may_act_for(self, user_external_id: str) -> bool:
        return self.user_external_id is None or self.user_external_id == user_external_id


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def ensure_tenant(conn: Conn, name: str) -> int:
    row = conn.execute(
        """INSERT INTO tenants (name) VALUES (%s)
           ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id""",
        (name,),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def register_key(conn: Conn, tenant_id: int, key: str, name: str = "", scopes: Sequence[str] | None = None) -> None:
    """Register a key chosen elsewhere (settings). `scopes` None = the column's default (all but metrics).
    A key already registered keeps what it has."""
    if scopes is None:
        conn.execute(
            """INSERT INTO api_keys (tenant_id, name, key_prefix, key_hash) VALUES (%s, %s, %s, %s)
               ON CONFLICT (key_hash) DO NOTHING""",
            (tenant_id, name, key[:10], hash_key(key)),
        )
        return
    conn.execute(
        """INSERT INTO api_keys (tenant_id, name, key_prefix, key_hash, scopes) VALUES (%s, %s, %s, %s, %s)
           ON CONFLICT (key_hash) DO NOTHING""",
        (tenant_id, name, key[:10], hash_key(key), list(scopes)),
    )


def create_key(conn: Conn, tenant_name: str, name: str = "") -> str:
    key = generate_key()
    register_key(conn, ensure_tenant(conn, tenant_name), key, name)
    return key


def key_is_valid(conn: Conn, key: str) -> bool:
    row = conn.execute("SELECT 1 FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL", (hash_key(key),)).fetchone()
    return row is not None


def authenticate(conn: Conn, key: str) -> Principal | None:
    row = conn.execute(
        # last_used_at is refreshed at most once a minute so reads do not each cost a row write.
        """WITH k AS (SELECT id, tenant_id, scopes, user_external_id FROM api_keys
                      WHERE key_hash = %s AND revoked_at IS NULL),
                touch AS (UPDATE api_keys SET last_used_at = now()
                          WHERE id IN (SELECT id FROM k)
                            AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute'))
           SELECT t.id, t.name, k.id AS key_id, k.scopes, k.user_external_id
           FROM k JOIN tenants t ON t.id = k.tenant_id""",
        (hash_key(key),),
    ).fetchone()
    if row is None:
        return None
    return Principal(
        id=row["id"],
        name=row["name"],
        key_id=row["key_id"],
        scopes=frozenset(row["scopes"]),
        user_external_id=row["user_external_id"],
    )
