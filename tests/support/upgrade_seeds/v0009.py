"""0009 maintenance: a finished job run, a memory's decay clock and enrichment mark, a consolidation mark."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    conn.execute(
        """INSERT INTO job_runs (job, period, status, as_of, counts, changed, finished_at)
           VALUES ('decay', '2026-03-05', 'done', now(), '{"memories": 3}', 1, now())"""
    )
    conn.execute(
        "UPDATE memories SET decayed_at = now(), enriched_at = now() WHERE id = %s", (world.ids["memory_pet"],)
    )
    conn.execute(
        "UPDATE sessions SET consolidated_at = now(), consolidated_message_id = 2 WHERE id = %s",
        (world.ids["session"],),
    )
