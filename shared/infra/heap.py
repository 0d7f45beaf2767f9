"""The heap a long-lived process built at startup, kept out of Python's full garbage collections.

A gateway or worker imports and loads hundreds of thousands of objects that live until it exits
(modules, the web framework's routes, the embedding model's Python side). Python's full collection walks
every tracked object each time it runs: about 120 ms for a started gateway on a shared core, during which
no request is served, and in a prefork worker's parent no task is handed to a child. Freezing moves them
to a permanent generation that collections skip; objects made afterwards are collected as before. In a
prefork worker it also keeps the children from writing to the pages they share with the parent (a
collection writes to every object it walks), so those stay shared instead of being copied per child.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect once (startup garbage should not be kept forever), then freeze what is left.

    Returns how many objects are now frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
