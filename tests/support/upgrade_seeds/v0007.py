"""0007 ingest: a batch of an outside conversation (an 'ingest' turn) whose messages name their speakers
and carry their own idempotency keys."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

MESSAGES = [
    ("user", "Maria", "Bob, did you book the ferry to Porto Santo?", "m-1"),
    ("assistant", "Concierge", "Booked for the 3rd of June, cabin 12", "m-2"),
]


def seed(conn: Conn, world: World) -> None:
    tenant, bob = world.ids["tenant"], world.ids["bob"]
    session = insert(
        conn,
        "INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, 'ferry') RETURNING id",
        (tenant, bob),
    )
    turn = insert(
        conn,
        """INSERT INTO turns (tenant_id, user_id, session_id, status, kind, details, finished_at)
           VALUES (%s, %s, %s, 'done', 'ingest', %s, now()) RETURNING id""",
        (tenant, bob, session, Jsonb({"metadata": {"source": "import"}})),
    )
    for role, name, content, key in MESSAGES:
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, name, content,
                                             idempotency_key)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
            (tenant, bob, session, turn, role, name, content, key),
        )
    world.ids.update(session_ferry=session, turn_ingest=turn)
