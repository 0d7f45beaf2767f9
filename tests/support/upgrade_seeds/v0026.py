"""0026 changes which messages count as conversation (a function: the offline rules' replies do not): no column,
nothing new to seed. The messages and units seeded before it are all a person's words and stay as they were."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
