"""Reads of memories by id and key, lists of a user's memories, and a memory's history.

Every read filters by tenant and user itself. Apart from the write path (store.py) because none of these
lock or write a memory (`touch_accessed` only counts a use); the write path reads the active row of a key
with `FIND_ACTIVE`, behind the key's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from shared.infra.db import Conn
from shared.memory.keys import normalize_namespace, sanitize
from shared.memory.memory_input import clean_tags
from shared.memory.rows import MEMORY_COLUMNS, DecayedMemoryRow, MemoryRow, Scope, memory_row, memory_rows
from shared.text import escape_like

# A key's active row; the write path sends it behind the key's lock (store.py `_lock_and_look`).
FIND_ACTIVE = f"""SELECT {MEMORY_COLUMNS} FROM memories
                   WHERE tenant_id = %s AND user_id = %s AND namespace = %s AND key = %s AND valid_until IS NULL"""


def find_active(conn: Conn, scope: Scope, namespace: str, key: str) -> MemoryRow | None:
    return memory_row(conn.execute(FIND_ACTIVE, (scope.tenant_id, scope.user_id, namespace, key)).fetchone())


_ONE_MEMORY = "SELECT {columns} FROM memories WHERE tenant_id = %s AND user_id = %s AND id = %s"


def get_memory(conn: Conn, scope: Scope, memory_id: int) -> MemoryRow | None:
    return memory_row(
        conn.execute(_ONE_MEMORY.format(columns=MEMORY_COLUMNS), (scope.tenant_id, scope.user_id, memory_id)).fetchone()
    )


def get_memory_with_decay(conn: Conn, scope: Scope, memory_id: int) -> DecayedMemoryRow | None:
    """`get_memory`'s row and when decay last lowered its confidence (the console's memory page says it)."""
    row = conn.execute(
        _ONE_MEMORY.format(columns=f"{MEMORY_COLUMNS}, decayed_at"), (scope.tenant_id, scope.user_id, memory_id)
    ).fetchone()
    return cast("DecayedMemoryRow | None", row)


def recall(conn: Conn, scope: Scope, key: str, namespace: str | None = None) -> list[MemoryRow]:
    """Active memories with this key (in one namespace, or in any)."""
    key, _ = sanitize(key, "x")
    if namespace is not None:
        row = find_active(conn, scope, normalize_namespace(namespace), key)
        return [row] if row else []
    return memory_rows(
        conn.execute(
            f"""SELECT {MEMORY_COLUMNS} FROM memories
                WHERE tenant_id = %s AND user_id = %s AND key = %s AND valid_until IS NULL ORDER BY namespace""",
            (scope.tenant_id, scope.user_id, key),
        ).fetchall()
    )


def list_memories(
    conn: Conn,
    scope: Scope,
    *,
    namespace_prefix: str | None = None,
    kinds: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    include_superseded: bool = False,
    limit: int = 50,
    offset: int = 0,
) -> list[MemoryRow]:
    clauses = ["tenant_id = %(tenant)s", "user_id = %(user)s"]
    params: dict[str, Any] = {"tenant": scope.tenant_id, "user": scope.user_id, "limit": limit, "offset": offset}
    if not include_superseded:
        clauses.append("valid_until IS NULL")
    if namespace_prefix:
        clauses.append(namespace_prefix_sql(namespace_prefix, params))
    if kinds:
        clauses.append("kind = ANY(%(kinds)s)")
        params["kinds"] = list(kinds)
    if tags:
        clauses.append("tags @> %(tags)s")
        params["tags"] = clean_tags(tags)
    return memory_rows(
        conn.execute(
            f"""SELECT {MEMORY_COLUMNS} FROM memories WHERE {" AND ".join(clauses)}
                ORDER BY updated_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s""",
            params,
        ).fetchall()
    )


def namespace_prefix_sql(prefix: str, params: dict[str, Any], alias: str = "") -> str:
    """A namespace and everything under it (`tacit` matches `tacit/preferences`); sets the parameters."""
    column = f"{alias}.namespace" if alias else "namespace"
    params["ns"] = normalize_namespace(prefix)
    params["ns_like"] = escape_like(params["ns"]) + "/%"
    return f"({column} = %(ns)s OR {column} LIKE %(ns_like)s)"


def touch_accessed(conn: Conn, scope: Scope, memory_ids: Sequence[int]) -> None:
    """Returning memories to the agent counts as use: decay is measured from the last access."""
    if memory_ids:
        conn.execute(
            """UPDATE memories SET access_count = access_count + 1, last_accessed_at = now()
               WHERE tenant_id = %s AND user_id = %s AND id = ANY(%s)""",
            (scope.tenant_id, scope.user_id, list(memory_ids)),
        )


def memory_history(conn: Conn, scope: Scope, memory_id: int) -> list[dict[str, Any]] | None:
    """Every event of the memory's (namespace, key) chain, oldest first; None if no such memory."""
    memory = get_memory(conn, scope, memory_id)
    if memory is None:
        return None
    return memory_events(conn, scope, memory)


def memory_events(
    conn: Conn, scope: Scope, memory: MemoryRow, *, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    """The events of a memory already read (its namespace and key name the chain), oldest first: all of them,
    or `limit` from `offset` on (a page)."""
    return conn.execute(
        """SELECT id, memory_id, action, namespace, key, old_value, new_value, actor, details, created_at
           FROM memory_events
           WHERE tenant_id = %s AND user_id = %s AND namespace = %s AND key = %s ORDER BY id LIMIT %s OFFSET %s""",
        (scope.tenant_id, scope.user_id, memory["namespace"], memory["key"], limit, offset),
    ).fetchall()
