"""What engram derived about a user: the entities named in their memories (each with the memories that name
it) and the weekly reflections, newest week first. A page is two queries for entities and one for
reflections, whatever the user holds."""

from __future__ import annotations

from typing import Any

from shared.console.paging import Page, make_page, page_bounds
from shared.infra.db import Conn
from shared.maintenance.reflection import NAMESPACE as REFLECTIONS
from shared.memory.store import Scope

# The memories shown under each entity; the entity's memory count says how many there are in all.
MEMORIES_PER_ENTITY = 5


def entity_page(conn: Conn, scope: Scope, *, page: int) -> Page:
    """The user's entities, most mentioned first, each with its active memories (the latest few) and how many
    active memories name it."""
    limit, offset = page_bounds(page)
    entities = conn.execute(
        """SELECT id, canonical_name, entity_type, aliases, mention_count, first_seen_at, last_seen_at
           FROM entities WHERE tenant_id = %s AND user_id = %s
           ORDER BY mention_count DESC, normalized_name, id LIMIT %s OFFSET %s""",
        (scope.tenant_id, scope.user_id, limit, offset),
    ).fetchall()
    links = conn.execute(
        # One query for the page: each entity's latest memories, ranked within the entity, and its count.
        """SELECT entity_id, id, key, namespace, value, total FROM (
               SELECT me.entity_id, m.id, m.key, m.namespace, m.value,
                      row_number() OVER (PARTITION BY me.entity_id ORDER BY m.updated_at DESC, m.id DESC) AS rank,
                      count(*) OVER (PARTITION BY me.entity_id) AS total
               FROM memory_entities me JOIN memories m ON m.id = me.memory_id
               WHERE me.entity_id = ANY(%s) AND m.tenant_id = %s AND m.user_id = %s AND m.valid_until IS NULL
           ) ranked WHERE rank <= %s ORDER BY entity_id, rank""",
        ([e["id"] for e in entities], scope.tenant_id, scope.user_id, MEMORIES_PER_ENTITY),
    ).fetchall()
    by_entity: dict[int, list[dict[str, Any]]] = {}
    totals: dict[int, int] = {}
    for link in links:
        by_entity.setdefault(link["entity_id"], []).append(link)
        totals[link["entity_id"]] = int(link["total"])
    rows = [{**e, "memories": by_entity.get(e["id"], []), "memory_count": totals.get(e["id"], 0)} for e in entities]
    return make_page(rows, page)


def reflection_page(conn: Conn, scope: Scope, *, page: int) -> Page:
    """The user's weekly reflections (active ones), newest week first: the week is the run's clock
    (event_time), the key names it (week-2026-w47)."""
    limit, offset = page_bounds(page)
    rows = conn.execute(
        # The reflections' namespace picks them out of the user's memories by the (user, namespace, key) index.
        """SELECT id, key, value, tags, metadata, coalesce(event_time, created_at) AS week_of, created_at
           FROM memories
           WHERE tenant_id = %s AND user_id = %s AND namespace = %s AND kind = 'reflection' AND valid_until IS NULL
           ORDER BY coalesce(event_time, created_at) DESC, id DESC LIMIT %s OFFSET %s""",
        (scope.tenant_id, scope.user_id, REFLECTIONS, limit, offset),
    ).fetchall()
    return make_page(rows, page)
