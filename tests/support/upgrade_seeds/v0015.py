"""0015 transcript units: a message stored now gets its unit from the trigger; the drain then stores the
unit's vector (done here with the embedder, as the drain would)."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

TEXT = "My sister Ines is getting married in Sintra next September"


def seed(conn: Conn, world: World) -> None:
    tenant, alice = world.ids["tenant"], world.ids["alice"]
    session = insert(
        conn,
        "INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, 'family') RETURNING id",
        (tenant, alice),
    )
    message = insert(
        conn,
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
           VALUES (%s, %s, %s, 'user', %s) RETURNING id""",
        (tenant, alice, session, TEXT),
    )
    unit = conn.execute("SELECT text FROM memory_chunks WHERE message_id = %s", (message,)).fetchone()
    assert unit is not None, "0015's trigger makes a unit for every conversational message"
    conn.execute(
        "UPDATE memory_chunks SET embedding = %s::vector, embedded_at = now() WHERE message_id = %s",
        (world.vector(unit["text"]), message),
    )
    world.ids.update(session_family=session, message_wedding=message)
