"""Writes over many of a user's memories at once: deleting a selection, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence

from shared.console.memories import ACTOR
from shared.memory import writes

# A selection comes from one page of the list; the bound keeps a crafted form's transaction short.
MAX_SELECTED = 100


class SelectionRefused(ValueError):
    """A selection that names no memory, or too many."""


def remove_many(owner: writes.Owner, memory_ids: Sequence[int]) -> int:
    """Delete each selected memory (each with its history event, as one delete does) through the write service:
    writes.MemoryGone for the first one that is not an active memory of the user, and then nothing is deleted,
    so a stale or crafted selection deletes nothing."""
    selected = len(set(memory_ids))
    if not selected:
        raise SelectionRefused("select at least one memory to delete")
    if selected > MAX_SELECTED:
        raise SelectionRefused(f"select at most {MAX_SELECTED} memories at once (this selection has {selected})")
    return writes.delete_many(owner, memory_ids, ACTOR)
