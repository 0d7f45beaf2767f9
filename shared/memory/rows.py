"""What store.py and derived.py both build on: whose memory (Scope), the columns a memory row is read with,
and the memory_events log. Here so that store.py can release what is derived from a memory it deletes
(derived.py) while derived.py retires reflections with the same row shape and events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from shared.infra.db import Conn


@dataclass(frozen=True)
class Scope:
    """Whose memory: every read and write is filtered by both ids."""

    tenant_id: int
    user_id: int


MEMORY_COLUMNS = """id, namespace, key, value, kind, tags, metadata, confidence, decay_rate, access_count,
    last_accessed_at, event_time, valid_from, valid_until, source, source_session_id, source_message_ids,
    supersedes_id, created_at, updated_at"""


def memory_source_sql(memory: str) -> tuple[str, str]:
    """The columns and joins that name where the memory row aliased `memory` came from: `source_session_key` (the
    session it was learned in) and `source_speaker` (who said the first message it was learned from, as that
    message's transcript unit names them)."""
    columns = "src_session.session_key AS source_session_key, src_unit.speaker AS source_speaker"
    joins = f"""LEFT JOIN sessions src_session ON src_session.id = {memory}.source_session_id
    LEFT JOIN memory_chunks src_unit ON src_unit.message_id = {memory}.source_message_ids[1]"""
    return columns, joins


def record_event(
    conn: Conn,
    scope: Scope,
    memory: dict[str, Any],
    action: str,
    actor: str,
    old_value: str | None = None,
    new_value: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        """INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, old_value, new_value,
                                      actor, details)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        (
            scope.tenant_id,
            scope.user_id,
            memory["id"],
            action,
            memory["namespace"],
            memory["key"],
            old_value,
            new_value,
            actor,
            Jsonb(details or {}),
        ),
    )
