"""0016 changes what a unit's vector is made of (a function, no column): nothing new to seed. Units seeded
before it keep their vectors (the final checks find 0015's message by meaning)."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
