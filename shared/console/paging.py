"""A page of rows: one more than the page size is fetched, so whether a next page exists costs no count query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

PAGE_SIZE = 25
# OFFSET paging this deep is never useful in a browser, and the limit keeps a crafted URL cheap.
MAX_PAGE = 400


# A page's rows: a record (a memory, MemoryRow) or a read's own dict.
RowT = TypeVar("RowT")


@dataclass(frozen=True)
class Page(Generic[RowT]):
    rows: list[RowT]
    number: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def page_bounds(number: int, size: int = PAGE_SIZE) -> tuple[int, int]:
    """(limit, offset) for page `number` (1-based), with one extra row to tell whether a next page exists."""
    number = min(max(number, 1), MAX_PAGE)
    return size + 1, (number - 1) * size


def make_page(rows: list[RowT], number: int, size: int = PAGE_SIZE) -> Page[RowT]:
    return Page(rows=rows[:size], number=min(max(number, 1), MAX_PAGE), has_next=len(rows) > size)
