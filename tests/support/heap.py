"""Whether an object is still walked by Python's garbage collections (not frozen by shared/infra/heap.py)."""

from __future__ import annotations

import gc


def walked_by_collections(obj: object) -> bool:
    return any(tracked is obj for tracked in gc.get_objects())
