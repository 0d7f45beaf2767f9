"""0012 prompt epochs: the memories a session's static prompt froze."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    conn.execute(
        """INSERT INTO session_prompt_epochs (session_id, tenant_id, user_id, memory_ids, knowledge_digest,
                                              base_digest, compaction_count, reason)
           VALUES (%s, %s, %s, %s, 'k1', 'b1', 0, 'first')""",
        (world.ids["session"], world.ids["tenant"], world.ids["alice"], [world.ids["memory_pet"]]),
    )
