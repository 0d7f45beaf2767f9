"""Freezing a process's startup heap: what lives is kept out of full collections, garbage is not kept."""

from __future__ import annotations

import weakref

from shared.infra.heap import freeze_startup_heap
from tests.support.heap import walked_by_collections


class _Node:
    other: _Node


def test_the_startup_heap_is_frozen_and_its_garbage_collected_first(unfreeze_after: None) -> None:
    kept = {"model": [1, 2, 3]}
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle: only a collection frees it
    cycle = weakref.ref(first)
    del first, second
    assert walked_by_collections(kept) and cycle() is not None

    frozen = freeze_startup_heap()

    assert frozen > 0
    assert cycle() is None  # garbage from startup is freed, not frozen for the life of the process
    assert not walked_by_collections(kept)  # what lives is skipped by every later collection
    later = {"request": [4]}
    assert walked_by_collections(later)  # what is made afterwards is collected as before
