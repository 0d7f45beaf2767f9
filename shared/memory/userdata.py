"""Everything engram holds about one user: export it, or erase it in one transaction.

Every table of the schema is classified here: either it holds user data (`USER_TABLES`, with the
predicate that selects one user's rows, used by both export and erasure) or it does not
(`NON_USER_TABLES`, with the reason). A test enumerates the live schema and fails on a table that is
in neither, so a new table cannot be forgotten by export or erasure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import RedisError

from shared.embeddings import forget_unused
from shared.infra.db import Conn, first
from shared.infra.events import stream_key
from shared.infra.logging import get_logger
from shared.memory.store import MEMORY_COLUMNS, Scope

log = get_logger(__name__)

# Parameters every predicate may use: tenant id, user id, and the user's external id.
_USER_TURNS = "SELECT id FROM turns WHERE tenant_id = %(t)s AND user_id = %(u)s"
_USER_MEMORIES = "SELECT id FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s"


@dataclass(frozen=True)
class UserTable:
    name: str
    predicate: str  # selects exactly this user's rows
    export_columns: str  # what the export shows (never secrets or raw vectors)
    export_order: str = "id"


# Erasure runs in this order: rows that reference others first (the foreign keys would cascade
# anyway, but explicit statements give per-table counts and do not depend on ON DELETE rules).
USER_TABLES: tuple[UserTable, ...] = (
    UserTable(
        "channel_deliveries",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, connection_id, turn_id, inbound_event_id, target, text, status, attempts, parts_sent, last_error, "
        "created_at, sent_at",
    ),
    UserTable(
        "inbound_events",
        # Channel events carry their user; older rows (and events without one) are found by their turn.
        f"tenant_id = %(t)s AND (user_id = %(u)s OR turn_id IN ({_USER_TURNS}))",
        "id, channel, connection_id, external_id, turn_id, payload, received_at",
    ),
    UserTable(
        "channel_identities",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, connection_id, platform_user_id, display_name, profile_fetched_at, created_at",
    ),
    UserTable(
        "api_keys",
        "tenant_id = %(t)s AND user_external_id = %(ext)s",
        "id, name, key_prefix, scopes, created_at, last_used_at, revoked_at",
    ),
    UserTable(
        "memory_entities",
        f"memory_id IN ({_USER_MEMORIES})",
        "memory_id, entity_id",
        "memory_id, entity_id",
    ),
    UserTable(
        "memory_chunks",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, memory_id, session_id, chunk_index, text, first_message_id, last_message_id, created_at",
    ),
    UserTable(
        "memory_events",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, memory_id, action, namespace, key, old_value, new_value, actor, details, created_at",
    ),
    UserTable("memories", "tenant_id = %(t)s AND user_id = %(u)s", MEMORY_COLUMNS),
    UserTable(
        "entities",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, canonical_name, entity_type, aliases, mention_count, first_seen_at, last_seen_at",
    ),
    UserTable(
        "documents",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, session_id, source_message_id, title, content, created_at",
    ),
    UserTable(
        "llm_calls",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, session_id, turn_id, purpose, provider, model, input_tokens, output_tokens, cache_read_tokens, "
        "cache_write_tokens, duration_ms, ok, created_at",
    ),
    UserTable(
        "session_messages",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, session_id, turn_id, role, content, name, tool_calls, tool_results, is_compacted, created_at",
        "session_id, turn_id NULLS FIRST, id",
    ),
    UserTable(
        "turns",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, session_id, kind, status, idempotency_key, details, reply, error, usage, created_at, finished_at",
    ),
    UserTable(
        "session_prompt_epochs",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "session_id, memory_ids, reason, compaction_count, started_at",
        "session_id",
    ),
    UserTable(
        "sessions",
        "tenant_id = %(t)s AND user_id = %(u)s",
        "id, channel, session_key, summary, active_task, compaction_count, created_at, updated_at",
    ),
    UserTable(
        "users",
        "tenant_id = %(t)s AND id = %(u)s",
        "id, external_id, display_name, location, timezone, occupation, interests, goals, context, "
        "communication_style, created_at, updated_at",
    ),
)

# Tables that hold no data of any one user, and why.
NON_USER_TABLES: dict[str, str] = {
    "tenants": "the tenant's name and budget",
    "agent_profiles": "the tenant's agent configuration",
    "personality_presets": "built-in and tenant-defined presets",
    "embedding_space": "which embedding model the database uses",
    "schema_migrations": "applied migration files",
    # A run limited to one user names that user's numeric id in `scope`, nothing else of theirs.
    "job_runs": "maintenance job bookkeeping (periods, cursors, counts)",
    # A tenant's bots; the people who talk to them are in channel_identities.
    "channel_connections": "the tenant's Slack and Telegram bots and their secrets",
    # Keyed by sha256 of the embedded text, with no owner; erasure deletes the rows of the user's
    # chunk texts that no other user's chunk shares (`shared.embeddings.forget_unused`).
    "embedding_cache": "vectors keyed by text hash, erased by hash",
}

# The export's section names that predate the table-named ones (clients read them).
_EXPORT_SECTION = {"users": "user", "session_messages": "messages"}


@dataclass
class Erasure:
    counts: dict[str, int] = field(default_factory=dict)
    turn_ids: list[int] = field(default_factory=list)


def _params(conn: Conn, scope: Scope) -> dict[str, Any]:
    row = conn.execute(
        "SELECT external_id FROM users WHERE tenant_id = %s AND id = %s", (scope.tenant_id, scope.user_id)
    ).fetchone()
    return {"t": scope.tenant_id, "u": scope.user_id, "ext": row["external_id"] if row else None}


def erase_user(conn: Conn, scope: Scope) -> Erasure:
    """Delete every row of the user (GDPR erasure) in the caller's transaction.

    Returns per-table counts and the ids whose live state in Redis the caller drops after commit
    (`drop_live_state`)."""
    params = _params(conn, scope)
    erasure = Erasure()
    erasure.turn_ids = [row["id"] for row in conn.execute(_USER_TURNS, params).fetchall()]
    hashes = [
        row["content_hash"]
        for row in conn.execute(
            "SELECT DISTINCT content_hash FROM memory_chunks WHERE tenant_id = %(t)s AND user_id = %(u)s", params
        ).fetchall()
    ]
    for table in USER_TABLES:
        erasure.counts[table.name] = conn.execute(f"DELETE FROM {table.name} WHERE {table.predicate}", params).rowcount
    # After the chunks went: what another user's chunk still has stays cached.
    erasure.counts["embedding_cache"] = forget_unused(conn, hashes)
    return erasure


def drop_live_state(client: redis.Redis, erasure: Erasure) -> None:
    """Best effort, after the erasure committed: the turns' event streams, which hold reply text for an
    hour. (Redis holds nothing else of a user's: locks and debounce keys are ids and tokens.)"""
    keys = [stream_key(turn_id) for turn_id in erasure.turn_ids]
    try:
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    except RedisError as exc:
        log.warning("could not drop an erased user's live state", error=str(exc), keys=len(keys))


def export_user(conn: Conn, scope: Scope) -> dict[str, Any]:
    """Every row `erase_user` would delete, table by table (no secrets, no raw vectors)."""
    params = _params(conn, scope)
    out: dict[str, Any] = {}
    for table in reversed(USER_TABLES):
        rows = conn.execute(
            f"SELECT {table.export_columns} FROM {table.name} WHERE {table.predicate} ORDER BY {table.export_order}",
            params,
        ).fetchall()
        out[_EXPORT_SECTION.get(table.name, table.name)] = rows
    out["user"] = first(out["user"])
    out["entities"] = _with_memory_ids(out["entities"], out["memory_entities"])
    return out


def _with_memory_ids(entities: list[dict[str, Any]], links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_entity: dict[int, list[int]] = {}
    for link in links:
        by_entity.setdefault(link["entity_id"], []).append(link["memory_id"])
    return [{**entity, "memory_ids": by_entity.get(entity["id"], [])} for entity in entities]
