"""The users of a tenant with their memory counts and last activity, one query a page."""

from __future__ import annotations

from typing import Any

from shared.console.paging import Page, make_page, page_bounds
from shared.infra.db import Conn

# What the page offers: id order, or most recently active first.
ORDERS = {"id": "User id (A–Z)", "active": "Most recently active first"}

# The tenant's users that match, the page of them chosen in the requested order, then counted: a page costs
# its 25 users' counts, not the tenant's memories. Last activity is the latest of the user's own change, their
# latest session and their latest active memory: each a probe of an index ((user, updated_at) of active
# memories, (user, channel, session key) of sessions), so ordering by it reads every user of the tenant but
# not their rows.
#
# A user's memory count is exact, and read from the partial (user, updated_at, id) index of active memories
# alone: no condition on a column outside it (a user id is its tenant's, so the user's rows are the tenant's),
# so Postgres counts index entries without visiting the table wherever the visibility map says a page holds
# no recent change (autovacuum keeps it so after writes). The latest memory is that index's first entry.
_SQL = """
WITH matching AS (
    SELECT id, tenant_id, external_id, display_name, created_at, updated_at FROM users
    WHERE tenant_id = %(tenant)s
      AND (%(only)s::text IS NULL OR external_id = %(only)s)
      AND (%(search)s = '' OR external_id ILIKE %(like)s OR coalesce(display_name, '') ILIKE %(like)s)
), chosen AS (
    {chosen}
)
SELECT u.external_id, u.display_name, u.created_at, m.memories, s.sessions,
       greatest(u.updated_at, s.last_session, lm.last_memory) AS last_active
FROM chosen u
CROSS JOIN LATERAL (SELECT count(*) AS memories FROM memories WHERE user_id = u.id AND valid_until IS NULL) m
LEFT JOIN LATERAL (SELECT updated_at AS last_memory FROM memories WHERE user_id = u.id AND valid_until IS NULL
                   ORDER BY updated_at DESC, id DESC LIMIT 1) lm ON true
CROSS JOIN LATERAL (SELECT count(*) AS sessions, max(updated_at) AS last_session FROM sessions
                    WHERE user_id = u.id AND tenant_id = u.tenant_id) s
ORDER BY {order}"""

_BY_ID = "SELECT * FROM matching ORDER BY external_id LIMIT %(limit)s OFFSET %(offset)s"
_BY_ACTIVITY = """SELECT u.*, greatest(u.updated_at,
           (SELECT max(updated_at) FROM sessions WHERE user_id = u.id),
           (SELECT updated_at FROM memories WHERE user_id = u.id AND valid_until IS NULL
            ORDER BY updated_at DESC, id DESC LIMIT 1)) AS active_at
    FROM matching u ORDER BY active_at DESC, external_id LIMIT %(limit)s OFFSET %(offset)s"""


def list_users(
    conn: Conn, tenant_id: int, *, search: str = "", only: str | None = None, order: str = "id", page: int = 1
) -> Page:
    """Users whose id or display name contains `search` (case-insensitive), in id order or most recently active
    first (`order`: a key of ORDERS). `only` restricts the list to one external id (a key bound to a user sees
    that user alone)."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; orders are {', '.join(ORDERS)}")
    limit, offset = page_bounds(page)
    sql = (
        _SQL.format(chosen=_BY_ACTIVITY, order="u.active_at DESC, u.external_id")
        if order == "active"
        else _SQL.format(chosen=_BY_ID, order="u.external_id")
    )
    params: dict[str, Any] = {
        "tenant": tenant_id,
        "only": only,
        "search": search,
        "like": "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
        "limit": limit,
        "offset": offset,
    }
    return make_page(conn.execute(sql, params).fetchall(), page)
