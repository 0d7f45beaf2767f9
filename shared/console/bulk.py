"""Writes over many of a user's memories at once: deleting a selection, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence

from shared.console.memories import ACTOR, MemoryGone
from shared.db import Conn
from shared.memory.store import Scope, delete_memory

# A selection comes from one page of the list; the bound keeps a crafted form's transaction short.
MAX_SELECTED = 100


class SelectionRefused(ValueError):
    """A selection that names no memory, or too many."""


def remove_many(conn: Conn, scope: Scope, memory_ids: Sequence[int]) -> int:
    """Delete each selected memory (each with its history event, as one delete does). Raises MemoryGone for the
    first one that is not an active memory of the user: the caller's transaction then rolls every delete back,
    so a stale or crafted selection deletes nothing."""
    selected = sorted(set(memory_ids))  # one order for every writer: two overlapping selections cannot deadlock
    if not selected:
        raise SelectionRefused("select at least one memory to delete")
    if len(selected) > MAX_SELECTED:
        raise SelectionRefused(f"select at most {MAX_SELECTED} memories at once (this selection has {len(selected)})")
    for memory_id in selected:
        if delete_memory(conn, scope, memory_id, ACTOR) is None:
            raise MemoryGone(memory_id)
    return len(selected)
