"""What store.py and derived.py both build on: whose memory (Scope), the columns a memory row is read with and
the record they are read into (MemoryRow), and the memory_events log. Here so that store.py can release what is
derived from a memory it deletes (derived.py) while derived.py retires reflections with the same row shape and
events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

from psycopg.rows import DictRow
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


class MemoryRow(TypedDict):
    """A memory as MEMORY_COLUMNS read it (psycopg's dict_row: at run time a plain dict). What the write path,
    the reads by id and key, the lists and the nightly jobs hand each other, the API and the agent's tools."""

    id: int
    namespace: str
    key: str
    value: str
    kind: str
    tags: list[str]
    metadata: dict[str, Any]  # free-form JSON: reinforced_count, first_observed, supersedes, context…
    confidence: float
    decay_rate: float
    access_count: int
    last_accessed_at: datetime | None
    event_time: datetime | None
    valid_from: datetime
    valid_until: datetime | None  # None = active; set = superseded or deleted
    source: str
    source_session_id: int | None
    source_message_ids: list[int]
    supersedes_id: int | None
    created_at: datetime
    updated_at: datetime


class DecayedMemoryRow(MemoryRow):
    """A memory read with MEMORY_COLUMNS and `decayed_at` (when decay last lowered its confidence): the rows decay
    pages through, and the memory as the console's page shows it."""

    decayed_at: datetime | None


class MemoryLine(TypedDict):
    """A remembered item as a prompt lists it (`- [namespace] key: value`): a fact the turn's relevant-memory
    search found, or an excerpt of another conversation (under its day and conversation, `key` its speaker)."""

    namespace: str
    key: str
    value: str


class MemoryEntry(MemoryLine):
    """A memory by its id and its line: the memories of a session's "What You Know" epoch as the epoch's read gives
    them back (context.epoch), consolidation's candidate conflicts, reflection's recent facts."""

    id: int


class KnownMemory(MemoryEntry):
    """A memory as the "What You Know" read gives it (context.static_prompt.what_you_know_query): chosen by use,
    with its source as a search result has it (`memory_source_sql`)."""

    kind: str
    access_count: int
    personality: bool  # a tacit/personality memory (its own, smaller, share of the list)
    valid_from: datetime
    event_time: datetime | None
    source_session_id: int | None
    source_message_ids: list[int]
    source_session_key: str | None
    source_speaker: str | None


def memory_row(row: DictRow | None) -> MemoryRow | None:
    """A row read with MEMORY_COLUMNS (or `RETURNING` them), as the record it is."""
    return cast("MemoryRow | None", row)


def memory_rows(rows: list[DictRow]) -> list[MemoryRow]:
    """Rows read with MEMORY_COLUMNS, as records."""
    return cast("list[MemoryRow]", rows)


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
    memory: MemoryRow,
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
