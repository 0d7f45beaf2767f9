"""The command line of one worker pool (shared/queues.py POOLS), built from the settings.

One builder for every way a pool runs: `engram up --cluster` spawns it, and `engram worker POOL` (the
command of docker-compose.yml and ops/k8s) executes it, so the queues, the node name, the flags and
the `--autoscale` bounds (ENGRAM_POOL_<POOL>_MIN/MAX_PROCESSES) cannot drift apart.
"""

from __future__ import annotations

import sys

from shared.config import Settings
from shared.queues import POOLS

# Workers have nothing to learn from each other (mingle: revoked ids at start; gossip: peer events),
# and both bootsteps reconnect badly after Redis restarts (a worker can stop consuming).
WORKER_FLAGS = ("--without-mingle", "--without-gossip")


class UnknownPool(ValueError):
    pass


def pool_argv(settings: Settings, pool: str, python: str | None = None) -> list[str]:
    """`python -m celery … worker` for `pool`: its queues, `<pool>@%h`, and Celery's autoscaler between the
    pool's bounds (it adds processes while tasks wait for one and removes idle ones again)."""
    if pool not in POOLS:
        raise UnknownPool(f"unknown pool {pool!r}; pools: {', '.join(POOLS)}")
    low, high = settings.pool_processes(pool)
    return [
        python or sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.app",
        "worker",
        "-Q",
        ",".join(POOLS[pool]),
        "-n",
        f"{pool}@%h",
        f"--autoscale={high},{low}",  # Celery's order: max,min
        *WORKER_FLAGS,
        "--loglevel",
        settings.log_level,
    ]
