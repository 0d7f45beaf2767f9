"""0024 adds an index (the speakers of a user's transcript units): no column, nothing new to seed. The speakers of
the units seeded before it are read through it after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
