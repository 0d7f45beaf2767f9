"""A user's memories for the console: a page of them (listed or searched), one memory with everything about
it, and the writes, which go through the same store functions as the REST API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.console.paging import PAGE_SIZE, Page, make_page, page_bounds
from shared.db import Conn
from shared.dispatch import get_dispatcher
from shared.logging import get_logger
from shared.memory.search import SearchFilters
from shared.memory.service import search_memories
from shared.memory.store import (
    MemoryInput,
    Scope,
    WriteResult,
    correct_memory,
    delete_memory,
    find_active,
    get_memory,
    list_memories,
    memory_history,
    store_memory,
    update_attributes,
)
from shared.transcript.sources import MessageSource, message_sources

log = get_logger(__name__)
ACTOR = "console"
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
    rows = [r.as_dict() | {"tags": r.tags, "confidence": r.confidence} for r in results[start : start + PAGE_SIZE + 1]]
    return make_page(rows, page)


@dataclass(frozen=True)
class MemoryDetail:
    memory: dict[str, Any]
    history: list[dict[str, Any]]
    sources: list[MessageSource]
    entities: list[dict[str, Any]] = field(default_factory=list)

    @property
    def protected(self) -> bool:
        return float(self.memory["decay_rate"]) == 0.0

    @property
    def active(self) -> bool:
        return self.memory["valid_until"] is None


def memory_detail(conn: Conn, scope: Scope, memory_id: int) -> MemoryDetail | None:
    """The memory, its history (every event of its namespace and key), its source messages with their text,
    and its entities: four queries whatever the memory."""
    memory = get_memory(conn, scope, memory_id)
    if memory is None:
        return None
    history = memory_history(conn, scope, memory_id) or []
    sources = message_sources(conn, scope, memory["source_message_ids"], excerpts=True)
    entities = conn.execute(
        """SELECT e.canonical_name, e.entity_type, e.mention_count FROM memory_entities me
           JOIN entities e ON e.id = me.entity_id
           WHERE me.memory_id = %s AND e.tenant_id = %s AND e.user_id = %s ORDER BY e.canonical_name""",
        (memory_id, scope.tenant_id, scope.user_id),
    ).fetchall()
    return MemoryDetail(memory=memory, history=history, sources=sources, entities=entities)


class MemoryGone(LookupError):
    """The memory is not active any more (superseded or deleted), or not this user's."""


def create(conn: Conn, scope: Scope, item: MemoryInput) -> WriteResult:
    """Store a memory (MemoryRejected when the store refuses it); its embedding is queued after the commit
    by `index_later`."""
    return store_memory(conn, scope, item, ACTOR)


def edit(conn: Conn, scope: Scope, memory_id: int, *, value: str, tags: list[str]) -> WriteResult:
    """A new value supersedes the memory (its history keeps the old one); new tags change it in place."""
    current = get_memory(conn, scope, memory_id)
    if current is None or current["valid_until"] is not None:
        raise MemoryGone(memory_id)
    result: WriteResult | None = None
    target = memory_id
    if value != current["value"]:
        result = correct_memory(conn, scope, memory_id, value, ACTOR)
        if result is None:
            raise MemoryGone(memory_id)
        target = result.memory["id"]
    updated = current
    if tags != list(current["tags"]) or result is not None:
        changed = update_attributes(conn, scope, target, ACTOR, tags=tags)
        if changed is None:
            raise MemoryGone(memory_id)
        updated = changed
    if result is None:
        return WriteResult("unchanged", updated, None)  # the text is the same: nothing to re-embed
    return WriteResult(result.action, updated, result.previous_id)


def remove(conn: Conn, scope: Scope, memory_id: int) -> None:
    if delete_memory(conn, scope, memory_id, ACTOR) is None:
        raise MemoryGone(memory_id)


def restore(conn: Conn, scope: Scope, memory_id: int) -> WriteResult:
    """Bring back an old version's value: it supersedes the active memory of its namespace and key, or, when
    that was deleted, is stored again (with its kind, tags and sources). Its history records either."""
    old = get_memory(conn, scope, memory_id)
    if old is None or old["valid_until"] is None:  # unknown, or active already: nothing to restore
        raise MemoryGone(memory_id)
    active = find_active(conn, scope, old["namespace"], old["key"])
    if active is not None:
        result = correct_memory(conn, scope, active["id"], old["value"], ACTOR)
        if result is None:
            raise MemoryGone(memory_id)
        return result
    item = MemoryInput(
        key=old["key"],
        value=old["value"],
        namespace=old["namespace"],
        kind=old["kind"],
        tags=list(old["tags"]),
        source_session_id=old["source_session_id"],
        source_message_ids=list(old["source_message_ids"]),
    )
    return store_memory(conn, scope, item, ACTOR)


def index_later(result: WriteResult) -> None:
    """Queue the embedding of a changed memory (after its transaction committed)."""
    if not result.changed:
        return
    try:
        get_dispatcher().enqueue_embed_memory(result.memory["id"])
    except Exception as exc:  # broker down: the unindexed-memory sweep embeds it later
        log.warning("could not enqueue embedding", memory_id=result.memory["id"], error=str(exc))
