"""0010 chat client: a turn of the OpenAI-compatible endpoint, with what the calling application asked for."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert


def seed(conn: Conn, world: World) -> None:
    tenant, alice, session = world.ids["tenant"], world.ids["alice"], world.ids["session"]
    turn = insert(
        conn,
        """INSERT INTO turns (tenant_id, user_id, session_id, status, client, reply, finished_at)
           VALUES (%s, %s, %s, 'done', %s, 'About 30 minutes by train.', now()) RETURNING id""",
        (tenant, alice, session, Jsonb({"model": "engram", "max_tokens": 200, "messages_sent": 1})),
    )
    for role, content in (("user", "How far is Nara from Kyoto?"), ("assistant", "About 30 minutes by train.")):
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content)
               VALUES (%s, %s, %s, %s, %s, %s)""",
            (tenant, alice, session, turn, role, content),
        )
    world.ids["turn_client"] = turn
