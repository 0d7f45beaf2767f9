"""The users of a tenant with their memory counts and last activity, one query a page."""

from __future__ import annotations

from shared.console.paging import Page, make_page, page_bounds
from shared.db import Conn


def list_users(conn: Conn, tenant_id: int, *, search: str = "", only: str | None = None, page: int = 1) -> Page:
    """Users whose id or display name contains `search` (case-insensitive), in id order. `only` restricts the
    list to one external id (a key bound to a user sees that user alone).

    The page of users is chosen first (the (tenant, external id) index), then counted: a page costs its 25
    users' rows, not the tenant's. Ordering by last activity would aggregate every memory of the tenant."""
    limit, offset = page_bounds(page)
    rows = conn.execute(
        """SELECT u.external_id, u.display_name, u.created_at, m.memories, s.sessions,
                  greatest(u.updated_at, s.last_session, m.last_memory) AS last_active
           FROM (SELECT id, tenant_id, external_id, display_name, created_at, updated_at FROM users
                 WHERE tenant_id = %(tenant)s
                   AND (%(only)s::text IS NULL OR external_id = %(only)s)
                   AND (%(search)s = '' OR external_id ILIKE %(like)s OR coalesce(display_name, '') ILIKE %(like)s)
                 ORDER BY external_id LIMIT %(limit)s OFFSET %(offset)s) u
           -- Active memories only: the partial (user_id, namespace) index holds exactly those.
           CROSS JOIN LATERAL (SELECT count(*) AS memories, max(updated_at) AS last_memory FROM memories
                               WHERE user_id = u.id AND tenant_id = u.tenant_id AND valid_until IS NULL) m
           CROSS JOIN LATERAL (SELECT count(*) AS sessions, max(updated_at) AS last_session FROM sessions
                               WHERE user_id = u.id AND tenant_id = u.tenant_id) s
           ORDER BY u.external_id""",
        {
            "tenant": tenant_id,
            "only": only,
            "search": search,
            "like": "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
            "limit": limit,
            "offset": offset,
        },
    ).fetchall()
    return make_page(rows, page)
