"""Scopes for tests that call the memory store directly."""

from __future__ import annotations

from shared.access.auth import ensure_tenant
from shared.infra.db import Conn
from shared.memory.store import Scope
from shared.turns.accept import ensure_user


def make_scope(conn: Conn, user: str = "alice", tenant: str = "default") -> Scope:
    """The scope of `user` in `tenant`, both created if new."""
    tenant_id = ensure_tenant(conn, tenant)
    return Scope(tenant_id, ensure_user(conn, tenant_id, user))
