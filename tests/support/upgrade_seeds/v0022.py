"""0022 adds an index (a tenant's transcript units by when they were stored): no column, nothing new to seed.
The units seeded before it are read by the lag chart through it after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
