"""0004 pipeline: a moved tool result (document), the turn's model calls in the ledger, watermarks."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World, insert


def seed(conn: Conn, world: World) -> None:
    tenant, alice, session, turn = (world.ids[k] for k in ("tenant", "alice", "session", "turn"))
    world.ids["document"] = insert(
        conn,
        """INSERT INTO documents (tenant_id, user_id, session_id, title, content)
           VALUES (%s, %s, %s, 'Kyoto temples', 'Kinkaku-ji, Ginkaku-ji, Fushimi Inari') RETURNING id""",
        (tenant, alice, session),
    )
    for _ in range(2):
        conn.execute(
            """INSERT INTO llm_calls (tenant_id, user_id, session_id, turn_id, purpose, provider, model, input_tokens,
                                      output_tokens)
               VALUES (%s, %s, %s, %s, 'chat', 'anthropic', 'claude', 1200, 40)""",
            (tenant, alice, session, turn),
        )
    conn.execute("UPDATE sessions SET last_flushed_message_id = last_extracted_message_id WHERE id = %s", (session,))
    conn.execute("UPDATE session_messages SET extracted_at = now() WHERE session_id = %s", (session,))
