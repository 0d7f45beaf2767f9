"""0005 rebuilds memories.search_tsv to include `metadata.context`: no new column a row fills in. A memory
carrying a context is written here, so the final checks can find it by a word of that context only."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert


def seed(conn: Conn, world: World) -> None:
    world.ids["memory_tea"] = insert(
        conn,
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, metadata)
           VALUES (%s, %s, 'tacit/preferences', 'tea', 'prefers green tea', 'preference', %s) RETURNING id""",
        (world.ids["tenant"], world.ids["alice"], Jsonb({"context": "said while packing for Uji"})),
    )
