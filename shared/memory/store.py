"""The memory write path and changes by id, used by agent tools, the REST API and extraction.

Rules (all inside the caller's transaction):
- keys and namespaces are normalised, values sanitised; injections and oversize text are refused
  with a reason (`MemoryRejected`; the checks are memory_input.py's `prepare` and `check_writer`);
- the same key with the same value is a no-op; the same content under another key of the
  namespace is a no-op;
- a new value for an existing key supersedes the old row (it gets `valid_until`, the new row
  records `supersedes`), so a corrected fact keeps its history;
- style observations are reinforced (count and timestamps) instead of overwritten;
- every change is written to memory_events with old and new value and the actor.

Writers of one (user, namespace, key) are serialised by a transaction-scoped advisory lock, so
two concurrent writes never both insert an active row.

Every UPDATE here filters by tenant and user itself, never trusting that an earlier read was scoped:
a row handed in by a caller (or an id from a request) that belongs to someone else changes nothing.

Reads by id and key, lists and history are reads.py's; what a write carries and its validation are
memory_input.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb

from shared.infra.db import Conn
from shared.memory.derived import release_derived
from shared.memory.entities import link_entities
from shared.memory.keys import content_fingerprint, content_key
from shared.memory.memory_input import (
    MAX_DECAY_RATE,
    MemoryInput,
    check_writer,
    clean_tags,
    is_style,
    prepare,
    storable_real,
)

# search.py and service.py import these two from here; reads.py is where they live.
from shared.memory.reads import FIND_ACTIVE, get_memory
from shared.memory.rows import MEMORY_COLUMNS, MemoryRow, Scope, memory_row, record_event

WriteAction = Literal["added", "superseded", "reinforced", "unchanged", "duplicate"]


class MemoryNotActive(LookupError):
    """The memory is not an active memory of this scope (another user's, or superseded/deleted meanwhile)."""


@dataclass
class WriteResult:
    action: WriteAction
    memory: MemoryRow
    previous_id: int | None = None

    @property
    def changed(self) -> bool:
        """True when the stored text changed, so the memory needs (re-)embedding."""
        return self.action in ("added", "superseded")


_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


def _lock_params(scope: Scope, namespace: str, key: str) -> tuple[str]:
    return (f"memory:{scope.user_id}:{namespace}:{key}",)


def _lock_key(conn: Conn, scope: Scope, namespace: str, key: str) -> None:
    conn.execute(_LOCK_KEY, _lock_params(scope, namespace, key))


def _lock_and_look(
    conn: Conn, scope: Scope, namespace: str, key: str, value: str
) -> tuple[MemoryRow | None, list[dict[str, Any]]]:
    """Take the key's lock, then read its active row and the namespace's same-content candidates
    (`same_content_statement`), in one round trip.

    The three stay separate statements, sent as one pipeline: Postgres runs them in order, each with its
    own snapshot (read committed), so both reads start after the lock is held and see whatever a writer
    that held it before us committed, exactly as when they are sent one by one. The candidates are read
    even when the key has an active row (they are then unused): one indexed read costs less than the
    round trip that waiting for the first answer would take on the far more frequent new-key path.
    """
    with conn.pipeline():
        conn.execute(_LOCK_KEY, _lock_params(scope, namespace, key))
        active = conn.execute(FIND_ACTIVE, (scope.tenant_id, scope.user_id, namespace, key))
        candidates = conn.execute(*same_content_statement(scope, namespace, key, value))
    return memory_row(active.fetchone()), candidates.fetchall()


def same_content_statement(scope: Scope, namespace: str, key: str, value: str) -> tuple[str, dict[str, Any]]:
    """The statement behind `_same_content_elsewhere` (separate so tests can EXPLAIN it).

    One round trip, two probes. Keyed rows: equal `content_key` (sha256 of the fingerprint, keys.py)
    through memories_content_key_idx, whatever the user's size. Rows written before migration 0014 have
    no key yet: their values are returned to be compared in Python as before (the fingerprint rules live
    only in keys.py), id and value alone; memories_content_key_legacy_idx holds exactly those rows, so
    once the nightly backfill (shared/memory/content_keys.py) has keyed them this branch reads nothing.
    """
    sql = """(SELECT id, NULL::text AS value FROM memories
               WHERE tenant_id = %(t)s AND user_id = %(u)s AND namespace = %(ns)s AND content_key = %(ck)s
                 AND key <> %(key)s AND valid_until IS NULL)
             UNION ALL
             (SELECT id, value FROM memories
               WHERE tenant_id = %(t)s AND user_id = %(u)s AND namespace = %(ns)s AND content_key IS NULL
                 AND key <> %(key)s AND valid_until IS NULL AND length(value) BETWEEN %(lo)s AND %(hi)s)"""
    params = {
        "t": scope.tenant_id,
        "u": scope.user_id,
        "ns": namespace,
        "key": key,
        "ck": content_key(value),
        "lo": max(0, len(value) // 2),
        "hi": len(value) * 2 + 8,
    }
    return sql, params


def _same_content_elsewhere(conn: Conn, rows: list[dict[str, Any]], value: str) -> MemoryRow | None:
    """The active memory among `same_content_statement`'s rows whose content is `value`'s, if any."""
    fingerprint = content_fingerprint(value)
    match = next(
        (row["id"] for row in rows if row["value"] is None or content_fingerprint(row["value"]) == fingerprint), None
    )
    if match is None:
        return None
    return memory_row(
        conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = %s AND valid_until IS NULL", (match,)
        ).fetchone()
    )


def _insert(
    conn: Conn,
    scope: Scope,
    item: MemoryInput,
    actor: str,
    supersedes: int | None,
    *,
    action: str,
    old_value: str | None = None,
    details: dict[str, Any] | None = None,
) -> MemoryRow:
    """Insert the memory and its `action` event (as `record_event` writes it, new_value the stored value)
    in one statement, then link its entities."""
    metadata = dict(item.metadata)
    if supersedes is not None:
        metadata["supersedes"] = supersedes
    if is_style(item):
        # The database clock, as reinforcement uses: timestamps of one memory must be comparable.
        clock = conn.execute("SELECT to_jsonb(now()) #>> '{}' AS now").fetchone()
        assert clock is not None
        now = clock["now"]
        metadata.setdefault("reinforced_count", 1)
        metadata.setdefault("first_observed", now)
        metadata.setdefault("last_reinforced", now)
    row = memory_row(
        conn.execute(
            f"""WITH inserted AS (
                INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, tags, metadata, confidence,
                                      decay_rate, event_time, source, source_session_id, source_message_ids,
                                      supersedes_id, content_key, valid_from)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()))
                RETURNING {MEMORY_COLUMNS}, tenant_id, user_id),
            event AS (
                INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, old_value, new_value,
                                           actor, details)
                SELECT tenant_id, user_id, id, %s, namespace, key, %s, value, %s, %s FROM inserted)
            SELECT {MEMORY_COLUMNS} FROM inserted""",
            (
                scope.tenant_id,
                scope.user_id,
                item.namespace,
                item.key,
                item.value,
                item.kind,
                list(item.tags),
                Jsonb(metadata),
                item.confidence,
                item.decay_rate,
                item.event_time,
                actor,
                item.source_session_id,
                list(item.source_message_ids),
                supersedes,
                content_key(item.value),
                item.valid_from,
                action,
                old_value,
                actor,
                Jsonb(details or {}),
            ),
        ).fetchone()
    )
    assert row is not None
    link_entities(conn, scope.tenant_id, scope.user_id, row["id"], f"{item.key.replace('-', ' ')}: {item.value}")
    return row


def store_memory(conn: Conn, scope: Scope, raw: MemoryInput, actor: str) -> WriteResult:
    item = prepare(raw)
    assert item.namespace is not None
    check_writer(item, actor)
    current, candidates = _lock_and_look(conn, scope, item.namespace, item.key, item.value)
    if current is not None:
        if is_style(item):
            return WriteResult("reinforced", _reinforce(conn, scope, current, actor))
        if content_fingerprint(current["value"]) == content_fingerprint(item.value):
            return WriteResult("unchanged", add_sources(conn, scope, current, item.source_message_ids))
        return _supersede(conn, scope, current, item, actor)
    duplicate = _same_content_elsewhere(conn, candidates, item.value)
    if duplicate is not None:
        return WriteResult("duplicate", add_sources(conn, scope, duplicate, item.source_message_ids))
    return WriteResult("added", _insert(conn, scope, item, actor, None, action="add"))


# A memory keeps the messages it was learned from; restated often, it keeps the first ones and the latest.
MAX_SOURCE_MESSAGES = 50


def add_sources(conn: Conn, scope: Scope, memory: MemoryRow, message_ids: Sequence[int]) -> MemoryRow:
    """The same fact learned again from other messages: they join its sources (no new version, no event)."""
    known = list(memory["source_message_ids"] or [])
    new = [i for i in dict.fromkeys(message_ids) if i not in set(known)]
    if not new:
        return memory
    merged = known + new
    if len(merged) > MAX_SOURCE_MESSAGES:
        merged = merged[: MAX_SOURCE_MESSAGES // 2] + merged[-(MAX_SOURCE_MESSAGES - MAX_SOURCE_MESSAGES // 2) :]
    row = memory_row(
        conn.execute(
            f"""UPDATE memories SET source_message_ids = %s
                WHERE tenant_id = %s AND user_id = %s AND id = %s RETURNING {MEMORY_COLUMNS}""",
            (merged, scope.tenant_id, scope.user_id, memory["id"]),
        ).fetchone()
    )
    return row or memory


def _reinforce(conn: Conn, scope: Scope, current: MemoryRow, actor: str) -> MemoryRow:
    row = memory_row(
        conn.execute(
            f"""UPDATE memories SET
                metadata = metadata
                    || jsonb_build_object('reinforced_count', coalesce((metadata->>'reinforced_count')::int, 1) + 1,
                                          'last_reinforced', to_jsonb(now()))
                    || CASE WHEN metadata ? 'first_observed' THEN '{{}}'::jsonb
                            ELSE jsonb_build_object('first_observed', to_jsonb(created_at)) END,
                updated_at = now()
            WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
            RETURNING {MEMORY_COLUMNS}""",
            (scope.tenant_id, scope.user_id, current["id"]),
        ).fetchone()
    )
    if row is None:
        raise MemoryNotActive(f"memory {current['id']} is not an active memory of this user")
    record_event(
        conn, scope, row, "reinforce", actor, details={"reinforced_count": row["metadata"]["reinforced_count"]}
    )
    return row


def _supersede(conn: Conn, scope: Scope, current: MemoryRow, item: MemoryInput, actor: str) -> WriteResult:
    closed = conn.execute(
        """UPDATE memories SET valid_until = now(), updated_at = now()
           WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL RETURNING id""",
        (scope.tenant_id, scope.user_id, current["id"]),
    ).fetchone()
    if closed is None:
        raise MemoryNotActive(f"memory {current['id']} is not an active memory of this user")
    successor = MemoryInput(
        key=item.key,
        value=item.value,
        namespace=item.namespace,
        kind=item.kind,
        tags=item.tags or current["tags"],
        metadata={**current["metadata"], **item.metadata},
        confidence=item.confidence,
        decay_rate=item.decay_rate,
        event_time=item.event_time,
        source_session_id=item.source_session_id,
        source_message_ids=item.source_message_ids,
        valid_from=item.valid_from,
    )
    memory = _insert(
        conn,
        scope,
        successor,
        actor,
        current["id"],
        action="supersede",
        old_value=current["value"],
        details={"superseded_id": current["id"]},
    )
    return WriteResult("superseded", memory, previous_id=current["id"])


# ------------------------------------------------------------------------------ changes by id


def delete_memory(conn: Conn, scope: Scope, memory_id: int, actor: str) -> MemoryRow | None:
    """Soft delete: the row stays in history with `valid_until`; search and lists skip it."""
    row = memory_row(
        conn.execute(
            f"""UPDATE memories SET valid_until = now(), updated_at = now()
            WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
            RETURNING {MEMORY_COLUMNS}""",
            (scope.tenant_id, scope.user_id, memory_id),
        ).fetchone()
    )
    if row is not None:
        record_event(conn, scope, row, "delete", actor, old_value=row["value"])
        release_derived(conn, scope, [row["id"]], actor=actor, forgotten=True)
    return row


def delete_memories(conn: Conn, scope: Scope, memory_ids: Sequence[int], actor: str) -> list[int]:
    """Soft delete several memories at once, each with its delete event as delete_memory writes it: the ids
    among `memory_ids` that were active memories of this scope and are deleted now, in id order.

    The rows are locked in id order before they change, so two overlapping selections wait for each other
    rather than deadlock; a row another writer deleted meanwhile is left out (the caller decides whether that
    undoes the rest)."""
    ids = sorted({int(i) for i in memory_ids})
    if not ids:
        return []
    rows = conn.execute(
        """WITH locked AS (
               SELECT id FROM memories
               WHERE tenant_id = %(tenant)s AND user_id = %(user)s AND id = ANY(%(ids)s) AND valid_until IS NULL
               ORDER BY id FOR UPDATE
           ), gone AS (
               UPDATE memories m SET valid_until = now(), updated_at = now() FROM locked WHERE m.id = locked.id
               RETURNING m.id, m.namespace, m.key, m.value
           )
           INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, old_value, actor, details)
           SELECT %(tenant)s, %(user)s, id, 'delete', namespace, key, value, %(actor)s, '{}'::jsonb
           FROM gone ORDER BY id
           RETURNING memory_id""",
        {"tenant": scope.tenant_id, "user": scope.user_id, "ids": ids, "actor": actor},
    ).fetchall()
    deleted = sorted(row["memory_id"] for row in rows)
    release_derived(conn, scope, deleted, actor=actor, forgotten=True)
    return deleted


def correct_memory(conn: Conn, scope: Scope, memory_id: int, new_value: str, actor: str) -> WriteResult | None:
    """Supersede an active memory with a corrected value (history keeps the old one)."""
    current = get_memory(conn, scope, memory_id)
    if current is None or current["valid_until"] is not None:
        return None
    item = MemoryInput(
        key=current["key"],
        value=new_value,
        namespace=current["namespace"],
        kind=current["kind"],
        tags=current["tags"],
        confidence=1.0,
        decay_rate=current["decay_rate"],
    )
    prepared = prepare(item)
    check_writer(prepared, actor)
    _lock_key(conn, scope, current["namespace"], current["key"])
    if content_fingerprint(current["value"]) == content_fingerprint(prepared.value):
        return WriteResult("unchanged", current)
    try:
        return _supersede(conn, scope, current, prepared, actor)
    except MemoryNotActive:  # superseded or deleted by another writer between our read and the lock
        return None


def update_attributes(
    conn: Conn,
    scope: Scope,
    memory_id: int,
    actor: str,
    *,
    tags: Sequence[str] | None = None,
    confidence: float | None = None,
    decay_rate: float | None = None,
    event_time: datetime | None = None,
) -> MemoryRow | None:
    """Change descriptive fields in place (the value itself changes only by superseding); None when the id is
    not an active memory of this scope."""
    if confidence is not None:
        confidence = storable_real("confidence", confidence, 1.0)
    if decay_rate is not None:
        decay_rate = storable_real("decay_rate", decay_rate, MAX_DECAY_RATE)
    changes = {
        "tags": clean_tags(tags) if tags is not None else None,
        "confidence": confidence,
        "decay_rate": decay_rate,
        "event_time": event_time,
    }
    changes = {name: value for name, value in changes.items() if value is not None}
    if not changes:
        current = get_memory(conn, scope, memory_id)
        return current if current is not None and current["valid_until"] is None else None
    assignments = ", ".join(f"{name} = %({name})s" for name in changes)
    row = memory_row(
        conn.execute(
            f"""UPDATE memories SET {assignments}, updated_at = now()
            WHERE tenant_id = %(tenant)s AND user_id = %(user)s AND id = %(id)s AND valid_until IS NULL
            RETURNING {MEMORY_COLUMNS}""",
            {**changes, "tenant": scope.tenant_id, "user": scope.user_id, "id": memory_id},
        ).fetchone()
    )
    if row is None:
        return None
    record_event(
        conn,
        scope,
        row,
        "update",
        actor,
        details={name: (str(value) if isinstance(value, datetime) else value) for name, value in changes.items()},
    )
    return row


def confirm_memory(conn: Conn, scope: Scope, memory_id: int, actor: str) -> MemoryRow | None:
    """The user vouched for it: full confidence, never decays."""
    row = memory_row(
        conn.execute(
            f"""UPDATE memories SET confidence = 1, decay_rate = 0, updated_at = now()
            WHERE tenant_id = %s AND user_id = %s AND id = %s AND valid_until IS NULL
            RETURNING {MEMORY_COLUMNS}""",
            (scope.tenant_id, scope.user_id, memory_id),
        ).fetchone()
    )
    if row is not None:
        record_event(conn, scope, row, "confirm", actor)
    return row
