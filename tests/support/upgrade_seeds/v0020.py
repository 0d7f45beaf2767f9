"""0020 changes a storage parameter of memory_chunks (rows kept inline up to a page): no column, nothing new to
seed. The chunks seeded before it are read and searched as before after the upgrade."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
