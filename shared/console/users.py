"""The users of a tenant with their memory counts and last activity, one query a page."""

from __future__ import annotations

from shared.console.paging import Page, make_page, page_bounds
from shared.db import Conn


def list_users(conn: Conn, tenant_id: int, *, search: str = "", only: str | None = None, page: int = 1) -> Page:
    """Users whose id or display name contains `search` (case-insensitive), most recently active first.
    `only` restricts the list to one external id (a key bound to a user sees that user alone)."""
    limit, offset = page_bounds(page)
    rows = conn.execute(
        """SELECT u.external_id, u.display_name, u.created_at,
                  (SELECT count(*) FROM memories m
                   WHERE m.user_id = u.id AND m.tenant_id = u.tenant_id AND m.valid_until IS NULL) AS memories,
                  (SELECT count(*) FROM sessions s WHERE s.user_id = u.id AND s.tenant_id = u.tenant_id) AS sessions,
                  greatest(u.updated_at,
                           (SELECT max(s.updated_at) FROM sessions s
                            WHERE s.user_id = u.id AND s.tenant_id = u.tenant_id),
                           (SELECT max(m.updated_at) FROM memories m
                            WHERE m.user_id = u.id AND m.tenant_id = u.tenant_id)) AS last_active
           FROM users u
           WHERE u.tenant_id = %(tenant)s
             AND (%(only)s::text IS NULL OR u.external_id = %(only)s)
             AND (%(search)s = '' OR u.external_id ILIKE %(like)s OR coalesce(u.display_name, '') ILIKE %(like)s)
           ORDER BY last_active DESC NULLS LAST, u.id DESC
           LIMIT %(limit)s OFFSET %(offset)s""",
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
