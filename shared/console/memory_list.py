"""A user's memory list for the console beyond the REST list: a choice of order, and a time window on when a
memory was created or last changed. Each order is an index's order, so a page reads about its 26 rows rather
than sorting every memory of the user (a window on the creation date filters the rows as the index yields
them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from shared.console.memories import MemoryFilters
from shared.console.paging import Page, make_page, page_bounds
from shared.infra.db import Conn
from shared.memory.memory_input import clean_tags
from shared.memory.reads import namespace_prefix_sql
from shared.memory.rows import MEMORY_COLUMNS
from shared.memory.store import Scope

# The order's SQL for each choice the page offers, and what the page calls it. Changed-first and
# changed-last read the (user, updated_at, id) index of active memories forwards or backwards, the two
# creation orders its (user, created_at, id) index; by key reads the unique (user, namespace, key) index of
# active memories.
SORTS: dict[str, tuple[str, str]] = {
    "changed": ("updated_at DESC, id DESC", "Recently changed first"),
    "oldest": ("updated_at ASC, id ASC", "Least recently changed first"),
    "created": ("created_at DESC, id DESC", "Newest created first"),
    "created_oldest": ("created_at ASC, id ASC", "Oldest created first"),
    "key": ("namespace, key, id", "Namespace and key (A–Z)"),
}
DEFAULT_SORT = "changed"
TIME_FIELDS = {"updated": "Changed", "created": "Created"}


class ListRefused(ValueError):
    """A list request the console cannot serve (an unknown order or date field, an empty time window)."""


@dataclass(frozen=True)
class TimeWindow:
    """Memories whose `field` (created or updated) falls on the days `start` to `end`, both included (UTC)."""

    field: str = "updated"
    start: date | None = None
    end: date | None = None

    @property
    def active(self) -> bool:
        return self.start is not None or self.end is not None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def check_list(sort: str, window: TimeWindow) -> None:
    if sort not in SORTS:
        raise ListRefused(f"unknown order {sort!r}; orders are {', '.join(SORTS)}")
    if window.field not in TIME_FIELDS:
        raise ListRefused(f"unknown date field {window.field!r}; fields are {', '.join(TIME_FIELDS)}")
    if window.start is not None and window.end is not None and window.start > window.end:
        raise ListRefused(f"the window starts ({window.start}) after it ends ({window.end})")


def list_page(conn: Conn, scope: Scope, filters: MemoryFilters, *, sort: str, window: TimeWindow, page: int) -> Page:
    """A page of the user's active memories in the chosen order, within the time window."""
    check_list(sort, window)
    limit, offset = page_bounds(page)
    clauses = ["tenant_id = %(tenant)s", "user_id = %(user)s", "valid_until IS NULL"]
    params: dict[str, Any] = {"tenant": scope.tenant_id, "user": scope.user_id, "limit": limit, "offset": offset}
    if filters.namespace:
        clauses.append(namespace_prefix_sql(filters.namespace, params))
    if filters.kind:
        clauses.append("kind = %(kind)s")
        params["kind"] = filters.kind
    if filters.tag:
        clauses.append("tags @> %(tags)s")
        params["tags"] = clean_tags([filters.tag])
    column = "created_at" if window.field == "created" else "updated_at"
    if window.start is not None:
        clauses.append(f"{column} >= %(start)s")
        params["start"] = _midnight(window.start)
    if window.end is not None:  # the whole last day
        clauses.append(f"{column} < %(end)s")
        params["end"] = _midnight(window.end + timedelta(days=1))
    rows = conn.execute(
        f"""SELECT {MEMORY_COLUMNS} FROM memories WHERE {" AND ".join(clauses)}
            ORDER BY {SORTS[sort][0]} LIMIT %(limit)s OFFSET %(offset)s""",
        params,
    ).fetchall()
    return make_page(rows, page)
