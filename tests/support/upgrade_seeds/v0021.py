"""0021 adds an index over queued turns (the tenant slots of shared/queueing/fairness.py): no column, nothing new to
seed. The queued turn seeded before it must still be found and run."""

from __future__ import annotations

from shared.infra.db import Conn
from tests.support.upgrade_seeds import World


def seed(conn: Conn, world: World) -> None:
    return None
