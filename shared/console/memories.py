"""A user's memories for the console: a page of them (listed or searched) and one memory with everything about
it. The console writes through the memory-write service every surface uses (shared/memory/writes.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.console.paging import PAGE_SIZE, Page, make_page, page_bounds
from shared.infra.db import Conn
from shared.maintenance.decay import protection
from shared.memory.reads import get_memory_with_decay, list_memories, memory_events
from shared.memory.rows import DecayedMemoryRow
from shared.memory.search import SearchFilters
from shared.memory.service import search_memories
from shared.memory.store import Scope
from shared.transcript.sources import MessageSource, message_sources

ACTOR = "console"  # who the memories' history names for the console's writes
# Search ranks the best N: a page deeper than this is not worth ranking for.
MAX_SEARCH_RESULTS = 200


@dataclass(frozen=True)
class MemoryFilters:
    kind: str | None = None
    namespace: str | None = None
    tag: str | None = None


def memory_page(conn: Conn, scope: Scope, *, query: str, filters: MemoryFilters, page: int) -> Page:
    """Active memories, most recently changed first; with a query, the best matches of full-text and semantic
    search (the service the REST search uses), best first."""
    if not query:
        limit, offset = page_bounds(page)
        rows = list_memories(
            conn,
            scope,
            namespace_prefix=filters.namespace,
            kinds=[filters.kind] if filters.kind else None,
            tags=[filters.tag] if filters.tag else None,
            limit=limit,
            offset=offset,
        )
        return make_page(rows, page)
    wanted = min(page * PAGE_SIZE + 1, MAX_SEARCH_RESULTS)
    results = search_memories(
        conn,
        scope,
        query,
        limit=wanted,
        filters=SearchFilters(
            namespace_prefix=filters.namespace,
            kinds=[filters.kind] if filters.kind else None,
            tags=[filters.tag] if filters.tag else None,
            include_transcripts=False,
        ),
    )
    start = (max(page, 1) - 1) * PAGE_SIZE
    found = [r.as_dict() | {"tags": r.tags, "confidence": r.confidence} for r in results[start : start + PAGE_SIZE + 1]]
    return make_page(found, page)


@dataclass(frozen=True)
class MemoryDetail:
    memory: DecayedMemoryRow
    history: Page  # a page of the memory's events, oldest first
    sources: list[MessageSource]
    entities: list[dict[str, Any]] = field(default_factory=list)

    @property
    def protection(self) -> str | None:
        """Why the nightly decay never touches this memory, or None when it decays."""
        return protection(self.memory)

    @property
    def active(self) -> bool:
        return self.memory["valid_until"] is None


def memory_detail(conn: Conn, scope: Scope, memory_id: int, *, history_page: int = 1) -> MemoryDetail | None:
    """The memory, a page of its history (the events of its namespace and key), its source messages with their
    text, and its entities: four queries whatever the memory."""
    memory = get_memory_with_decay(conn, scope, memory_id)  # the page says when it decayed
    if memory is None:
        return None
    limit, offset = page_bounds(history_page)
    history = make_page(memory_events(conn, scope, memory, limit=limit, offset=offset), history_page)
    sources = message_sources(conn, scope, memory["source_message_ids"], excerpts=True)
    entities = conn.execute(
        """SELECT e.canonical_name, e.entity_type, e.mention_count FROM memory_entities me
           JOIN entities e ON e.id = me.entity_id
           WHERE me.memory_id = %s AND e.tenant_id = %s AND e.user_id = %s ORDER BY e.canonical_name""",
        (memory_id, scope.tenant_id, scope.user_id),
    ).fetchall()
    return MemoryDetail(memory=memory, history=history, sources=sources, entities=entities)
