"""0003 context: the tenant's agent profile and token budget, a session's budget warning."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    tenant = world.ids["tenant"]
    conn.execute(
        """INSERT INTO agent_profiles (tenant_id, name, personality_preset, vibe)
           VALUES (%s, 'Ada', 'professional', 'calm')""",
        (tenant,),
    )
    conn.execute("UPDATE tenants SET monthly_token_budget = 5000000 WHERE id = %s", (tenant,))
    conn.execute("UPDATE sessions SET budget_warned_at = now() WHERE id = %s", (world.ids["session"],))
