"""0023 adds an index (a session's transcript units in message order): no column, nothing new to seed. The units
seeded before it are found around a search hit through it after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
