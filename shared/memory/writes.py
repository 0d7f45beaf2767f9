"""One way to write a memory: REST, MCP, the console and the agent's tools store, correct, change, restore and
delete through these functions, so each write finds its user the same way, passes the same checks (the store's
MemoryRejected), commits in one transaction and has its new text embedded after the commit.

The surfaces keep only what is theirs: which permission a caller needs, how an error reads to it (an HTTP
status, a tool error, a form message) and how the written memory is shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.infra import db
from shared.infra.db import Conn
from shared.infra.logging import get_logger
from shared.memory.memory_input import MemoryInput
from shared.memory.reads import find_active, get_memory
from shared.memory.rows import MemoryRow
from shared.memory.store import (
    Scope,
    WriteResult,
    correct_memory,
    delete_memories,
    delete_memory,
    store_memory,
    update_attributes,
)
from shared.queueing.dispatch import get_dispatcher
from shared.turns.accept import ensure_user, find_user_id

log = get_logger(__name__)

# Queues a committed memory's embedding by id; None: the caller has no queue (nothing is scheduled).
Enqueue = Callable[[int], None] | None


@dataclass(frozen=True)
class UserRef:
    """A user as callers name them: the tenant and the tenant's own id for the user."""

    tenant_id: int
    user: str


Owner = Scope | UserRef


class UnknownUser(LookupError):
    """No such user for this tenant (only a store creates users)."""


class MemoryGone(LookupError):
    """The memory is not active any more (superseded or deleted), or not this user's."""


class NoSuchMemory(MemoryGone):
    """No memory with this id for this user, active or not."""


def find_scope(conn: Conn, tenant_id: int, user: str, *, create: bool = False) -> Scope | None:
    """The user's memory scope; None for a user engram has never seen unless `create` (reading must not create
    users, storing does)."""
    internal = ensure_user(conn, tenant_id, user) if create else find_user_id(conn, tenant_id, user)
    return None if internal is None else Scope(tenant_id, internal)


def _scope(conn: Conn, owner: Owner, *, create: bool = False) -> Scope:
    if isinstance(owner, Scope):
        return owner
    scope = find_scope(conn, owner.tenant_id, owner.user, create=create)
    if scope is None:
        raise UnknownUser(owner.user)
    return scope


def dispatch_embedding(memory_id: int) -> None:
    """The gateway's way to queue an embedding: through its dispatcher (shared/queueing/dispatch.py)."""
    get_dispatcher().enqueue_embed_memory(memory_id)


def index_later(result: WriteResult, enqueue: Enqueue = dispatch_embedding) -> None:
    """Queue the embedding of a changed memory (after its transaction committed)."""
    if not result.changed or enqueue is None:
        return
    try:
        enqueue(result.memory["id"])
    except Exception as exc:  # broker down: the unindexed-memory sweep embeds it later
        log.warning("could not enqueue embedding", memory_id=result.memory["id"], error=str(exc))


def store(owner: Owner, item: MemoryInput, actor: str, *, enqueue: Enqueue = dispatch_embedding) -> WriteResult:
    """Store a memory (creating its user); MemoryRejected when the store refuses it."""
    with db.connection() as conn:
        result = store_memory(conn, _scope(conn, owner, create=True), item, actor)
    index_later(result, enqueue)
    return result


def correct(
    owner: Owner, memory_id: int, value: str, actor: str, *, enqueue: Enqueue = dispatch_embedding
) -> WriteResult:
    """Supersede an active memory with a corrected value (its history keeps the old one); MemoryGone when it is
    not an active memory of the user, MemoryRejected when the store refuses the value."""
    with db.connection() as conn:
        result = correct_memory(conn, _scope(conn, owner), memory_id, value, actor)
    if result is None:
        raise MemoryGone(memory_id)
    index_later(result, enqueue)
    return result


@dataclass(frozen=True)
class Attributes:
    """Descriptive fields changed in place (None: unchanged)."""

    tags: Sequence[str] | None = None
    confidence: float | None = None
    decay_rate: float | None = None
    event_time: datetime | None = None


def amend(
    owner: Owner,
    memory_id: int,
    actor: str,
    *,
    value: str | None = None,
    attributes: Attributes = Attributes(),
    enqueue: Enqueue = dispatch_embedding,
) -> WriteResult:
    """Change an active memory: a new value supersedes it (a new memory, its history keeps the old one), the
    attributes change the memory that results in place. NoSuchMemory for an unknown id, MemoryGone for one
    superseded or deleted (also by another writer meanwhile); MemoryRejected when the store refuses."""
    with db.connection() as conn:
        scope = _scope(conn, owner)
        current = get_memory(conn, scope, memory_id)
        if current is None:
            raise NoSuchMemory(memory_id)
        if current["valid_until"] is not None:
            raise MemoryGone(memory_id)
        result: WriteResult | None = None
        target = memory_id
        if value is not None and value != current["value"]:
            result = correct_memory(conn, scope, memory_id, value, actor)
            if result is None:  # another writer superseded or deleted it since we read it
                raise MemoryGone(memory_id)
            target = result.memory["id"]
        tags = attributes.tags
        if tags is not None and result is None and list(tags) == list(current["tags"]):
            tags = None  # the same tags on the same memory: no change to record
        updated = update_attributes(
            conn,
            scope,
            target,
            actor,
            tags=tags,
            confidence=attributes.confidence,
            decay_rate=attributes.decay_rate,
            event_time=attributes.event_time,
        )
        if updated is None:
            raise MemoryGone(memory_id)
    final = WriteResult(result.action if result else "unchanged", updated, result.previous_id if result else None)
    index_later(final, enqueue)
    return final


def restore(owner: Owner, memory_id: int, actor: str, *, enqueue: Enqueue = dispatch_embedding) -> WriteResult:
    """Bring back an old version's value: it supersedes the active memory of its namespace and key, or, when
    that was deleted, is stored again (with its kind, tags and sources). Its history records either. MemoryGone
    when the id is unknown or active already (nothing to restore)."""
    with db.connection() as conn:
        scope = _scope(conn, owner)
        old = get_memory(conn, scope, memory_id)
        if old is None or old["valid_until"] is None:
            raise MemoryGone(memory_id)
        active = find_active(conn, scope, old["namespace"], old["key"])
        if active is not None:
            corrected = correct_memory(conn, scope, active["id"], old["value"], actor)
            if corrected is None:
                raise MemoryGone(memory_id)
            result = corrected
        else:
            item = MemoryInput(
                key=old["key"],
                value=old["value"],
                namespace=old["namespace"],
                kind=old["kind"],
                tags=list(old["tags"]),
                source_session_id=old["source_session_id"],
                source_message_ids=list(old["source_message_ids"]),
            )
            result = store_memory(conn, scope, item, actor)
    index_later(result, enqueue)
    return result


def delete(owner: Owner, memory_id: int, actor: str) -> MemoryRow:
    """Forget an active memory (its row stays in history); MemoryGone when it is not an active memory of the
    user."""
    with db.connection() as conn:
        row = delete_memory(conn, _scope(conn, owner), memory_id, actor)
    if row is None:
        raise MemoryGone(memory_id)
    return row


def delete_many(owner: Owner, memory_ids: Sequence[int], actor: str) -> int:
    """Forget several active memories in one transaction, all or nothing: MemoryGone names the first that is not
    an active memory of the user, and then none is deleted. How many were deleted."""
    selected = sorted(set(memory_ids))
    with db.connection() as conn:
        deleted = delete_memories(conn, _scope(conn, owner), selected, actor)
        if len(deleted) < len(selected):
            missing = sorted(set(selected) - set(deleted))
            raise MemoryGone(missing[0])  # leaving the block rolls the deletes back
    return len(selected)
