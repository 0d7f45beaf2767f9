"""0025 adds an index (job runs newest first, as the console lists them): no column, nothing new to seed. The run
seeded at 0009 still reads as it was written after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
