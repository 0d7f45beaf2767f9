"""0019 adds an index (a user's active memories by creation): no column, nothing new to seed. The memories
seeded before it are listed through it after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
