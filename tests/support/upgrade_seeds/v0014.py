"""0014 content key: a memory written with its content key, as every insert does since."""

from __future__ import annotations

from shared.infra.db import Conn
from shared.memory.keys import content_key
from tests.support.upgrade_seeds import World, insert

VALUE = "is allergic to peanuts"


def seed(conn: Conn, world: World) -> None:
    world.ids["memory_allergy"] = insert(
        conn,
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, content_key)
           VALUES (%s, %s, 'tacit/facts', 'allergy', %s, %s) RETURNING id""",
        (world.ids["tenant"], world.ids["alice"], VALUE, content_key(VALUE)),
    )
