"""Everything engram holds about one user: export it, or erase it in one transaction."""

from __future__ import annotations

from typing import Any

from shared.db import Conn
from shared.memory.store import MEMORY_COLUMNS, Scope

# Child tables first; each statement is scoped by tenant and user.
_ERASE_ORDER = (
    (
        "memory_entities",
        "DELETE FROM memory_entities WHERE memory_id IN "
        "(SELECT id FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s)",
    ),
    ("memory_chunks", "DELETE FROM memory_chunks WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("memory_events", "DELETE FROM memory_events WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("memories", "DELETE FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("entities", "DELETE FROM entities WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("documents", "DELETE FROM documents WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("llm_calls", "DELETE FROM llm_calls WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("session_messages", "DELETE FROM session_messages WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("turns", "DELETE FROM turns WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("sessions", "DELETE FROM sessions WHERE tenant_id = %(t)s AND user_id = %(u)s"),
    ("users", "DELETE FROM users WHERE tenant_id = %(t)s AND id = %(u)s"),
)


def erase_user(conn: Conn, scope: Scope) -> dict[str, int]:
    """Delete every row of the user (GDPR erasure) in the caller's transaction; returns counts."""
    params = {"t": scope.tenant_id, "u": scope.user_id}
    hashes = [
        row["content_hash"]
        for row in conn.execute(
            "SELECT DISTINCT content_hash FROM memory_chunks WHERE tenant_id = %(t)s AND user_id = %(u)s", params
        ).fetchall()
    ]
    counts = {}
    for table, statement in _ERASE_ORDER:
        counts[table] = conn.execute(statement, params).rowcount
    # Cached embeddings of the user's text go too, unless another user's chunk has the same text.
    counts["embedding_cache"] = conn.execute(
        """DELETE FROM embedding_cache ec WHERE ec.content_hash = ANY(%s)
             AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.content_hash = ec.content_hash)""",
        (hashes,),
    ).rowcount
    return counts


def export_user(conn: Conn, scope: Scope) -> dict[str, Any]:
    params = {"t": scope.tenant_id, "u": scope.user_id}
    user = conn.execute(
        """SELECT external_id, display_name, location, timezone, occupation, interests, goals, context,
                  communication_style, created_at, updated_at FROM users WHERE tenant_id = %(t)s AND id = %(u)s""",
        params,
    ).fetchone()
    sessions = conn.execute(
        """SELECT id, channel, session_key, summary, active_task, compaction_count, created_at, updated_at
           FROM sessions WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY id""",
        params,
    ).fetchall()
    messages = conn.execute(
        """SELECT id, session_id, turn_id, role, content, tool_calls, tool_results, is_compacted, created_at
           FROM session_messages WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY session_id, turn_id, id""",
        params,
    ).fetchall()
    memories = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY id", params
    ).fetchall()
    events = conn.execute(
        """SELECT id, memory_id, action, namespace, key, old_value, new_value, actor, details, created_at
           FROM memory_events WHERE tenant_id = %(t)s AND user_id = %(u)s ORDER BY id""",
        params,
    ).fetchall()
    entities = conn.execute(
        """SELECT e.id, e.canonical_name, e.entity_type, e.aliases, e.mention_count,
                  coalesce(array_agg(me.memory_id) FILTER (WHERE me.memory_id IS NOT NULL), '{}') AS memory_ids
           FROM entities e LEFT JOIN memory_entities me ON me.entity_id = e.id
           WHERE e.tenant_id = %(t)s AND e.user_id = %(u)s GROUP BY e.id ORDER BY e.id""",
        params,
    ).fetchall()
    return {
        "user": user,
        "sessions": sessions,
        "messages": messages,
        "memories": memories,
        "memory_events": events,
        "entities": entities,
    }
