"""0013 embedding pending: a memory stored but not embedded yet (`embedded_at` NULL, no chunks): after the
upgrade it is still waiting for the embeddings drain, not lost from its work list."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert


def seed(conn: Conn, world: World) -> None:
    world.ids["memory_pending"] = insert(
        conn,
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value)
           VALUES (%s, %s, 'tacit/facts', 'sport', 'plays volleyball every Thursday evening') RETURNING id""",
        (world.ids["tenant"], world.ids["alice"]),
    )
