"""0001 core: a tenant, an API key, users with profile fields, a session with a finished chat turn (a tool call
and its result included) and an inbound channel event."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.access.auth import hash_key
from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert

KEY = "egm_upgrade-test-key-from-the-first-release"


def seed(conn: Conn, world: World) -> None:
    tenant = insert(conn, "INSERT INTO tenants (name) VALUES ('acme') RETURNING id")
    world.keys["first"] = KEY
    world.ids["key.first"] = insert(
        conn,
        "INSERT INTO api_keys (tenant_id, name, key_prefix, key_hash) VALUES (%s, 'first', %s, %s) RETURNING id",
        (tenant, KEY[:10], hash_key(KEY)),
    )
    alice = insert(
        conn,
        """INSERT INTO users (tenant_id, external_id, display_name, location, interests)
           VALUES (%s, 'alice', 'Alice', 'Lisbon', %s) RETURNING id""",
        (tenant, Jsonb(["volleyball"])),
    )
    bob = insert(conn, "INSERT INTO users (tenant_id, external_id) VALUES (%s, 'bob') RETURNING id", (tenant,))
    session = insert(
        conn,
        """INSERT INTO sessions (tenant_id, user_id, session_key, summary) VALUES (%s, %s, 'trip', 'Planning Kyoto')
           RETURNING id""",
        (tenant, alice),
    )
    turn = insert(
        conn,
        """INSERT INTO turns (tenant_id, user_id, session_id, status, idempotency_key, attempts, reply, usage,
                              started_at, finished_at)
           VALUES (%s, %s, %s, 'done', 'first-turn', 1, 'It is 9 in Kyoto. Enjoy the temples!',
                   '{"llm_calls": 2}', now(), now())
           RETURNING id""",
        (tenant, alice, session),
    )
    call = Jsonb([{"id": "c1", "name": "current_time", "input": {"timezone": "Asia/Tokyo"}}])
    messages = [
        ("user", "What time is it in Kyoto? I fly there in April", None, None),
        ("assistant", "Let me check.", call, None),
        ("tool", "", None, Jsonb({"tool_use_id": "c1", "content": "09:00", "is_error": False})),
        ("assistant", "It is 9 in Kyoto. Enjoy the temples!", None, None),
    ]
    for role, content, calls, results in messages:
        conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, tool_calls,
                                             tool_results)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
            (tenant, alice, session, turn, role, content, calls, results),
        )
    conn.execute(
        """INSERT INTO inbound_events (tenant_id, channel, external_id, turn_id, payload)
           VALUES (%s, 'slack', 'Ev-first', %s, '{"type": "message"}')""",
        (tenant, turn),
    )
    world.ids.update(tenant=tenant, alice=alice, bob=bob, session=session, turn=turn)
