"""The command line of every engram process (gateway, worker pools, beat, Flower), built from the settings.

One builder for every way they run: `engram up` and `engram up --cluster` (ops/stack.py) spawn them,
`engram worker POOL` (the command of docker-compose.yml and ops/k8s) executes a pool, the benchmarks'
LocalStack (ops/bench/stack.py) and the integration tests (tests/support/processes.py) start theirs. The
compose file and the k8s manifests spell the other commands in YAML; tests/unit/test_compose.py checks
them against what is built here (and test_k8s.py the manifests against the compose file). So the queues,
node names, flags, the `--autoscale` bounds (ENGRAM_POOL_<POOL>_MIN/MAX_PROCESSES) and the beat
scheduler cannot drift apart.

Every command runs `python -m <module>` with the given interpreter (default: this one), so a child uses
the same environment as its parent whatever is on PATH; the YAML files call the console scripts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from shared.infra.config import Settings
from shared.queueing.queues import POOLS

CELERY_APP = "workers.app"
GATEWAY_APP = "ops.gateway:create_app"  # an app factory (uvicorn --factory)
# How long the gateway keeps an idle HTTP connection open. uvicorn's default (5 s) equals httpx's own idle expiry
# (5 s; Node's fetch: 4 s), so a client reusing a connection just as the server closed it got "server
# disconnected without sending a response" (the soak saw it). The server must outlast its clients and proxies
# (an AWS load balancer keeps idle connections 60 s): 75 s, as nginx does.
GATEWAY_KEEP_ALIVE_SECONDS = 75
# Workers have nothing to learn from each other (mingle: revoked ids at start; gossip: peer events),
# and both bootsteps reconnect badly after Redis restarts (a worker can stop consuming).
WORKER_FLAGS = ("--without-mingle", "--without-gossip")
# workers/app.py configures the scheduler (RedBeat, workers/beat.py) too; the command line says it so that a
# deployment reading only the command (compose, k8s) sees that several beats may run (they share a leader lock
# in Redis).
BEAT_SCHEDULER = "workers.beat:Scheduler"


class UnknownPool(ValueError):
    pass


def _module(module: str, python: str | None) -> list[str]:
    return [python or sys.executable, "-m", module]


def _celery(python: str | None) -> list[str]:
    return [*_module("celery", python), "-A", CELERY_APP]


def gateway_argv(host: str, port: int, *, log_level: str | None = None, python: str | None = None) -> list[str]:
    """uvicorn with the gateway's app factory on `host:port`, without access log; `log_level` is uvicorn's
    own (its default when None)."""
    argv = [*_module("uvicorn", python), GATEWAY_APP, "--factory", "--host", host, "--port", str(port)]
    argv += ["--no-access-log", "--timeout-keep-alive", str(GATEWAY_KEEP_ALIVE_SECONDS)]
    if log_level is not None:
        argv += ["--log-level", log_level]
    return argv


def worker_argv(
    queues: Sequence[str],
    name: str,
    *,
    log_level: str,
    concurrency: int | None = None,
    autoscale: tuple[int, int] | None = None,
    python: str | None = None,
) -> list[str]:
    """A Celery worker on `queues`, node `<name>@%h`, with a fixed pool of `concurrency` processes or
    Celery's autoscaler between `autoscale` = (min, max): exactly one of the two."""
    if (concurrency is None) == (autoscale is None):
        raise ValueError("a worker needs either concurrency or autoscale bounds")
    if autoscale is not None:
        low, high = autoscale
        size = [f"--autoscale={high},{low}"]  # Celery's order: max,min
    else:
        size = ["-c", str(concurrency)]
    return [
        *_celery(python),
        "worker",
        "-Q",
        ",".join(queues),
        "-n",
        f"{name}@%h",
        *size,
        "--loglevel",
        log_level,
        *WORKER_FLAGS,
    ]


def pool_argv(settings: Settings, pool: str, python: str | None = None) -> list[str]:
    """The worker of `pool` (shared/queueing/queues.py POOLS): its queues, `<pool>@%h`, and Celery's autoscaler
    between the pool's bounds (it adds processes while tasks wait for one and removes idle ones again)."""
    if pool not in POOLS:
        raise UnknownPool(f"unknown pool {pool!r}; pools: {', '.join(POOLS)}")
    return worker_argv(
        POOLS[pool], pool, autoscale=settings.pool_processes(pool), log_level=settings.log_level, python=python
    )


def beat_argv(log_level: str, *, python: str | None = None) -> list[str]:
    """Celery beat with RedBeat: its schedule in Redis, sent by whichever beat holds the leader lock."""
    return [*_celery(python), "beat", "-S", BEAT_SCHEDULER, "--loglevel", log_level]


def flower_argv(host: str, port: int, *, db: str | None = None, python: str | None = None) -> list[str]:
    """Flower on `host:port`; with `db`, its task history persists in that file. Its login comes from the
    environment (`flower_env`), never from the command line, where `ps` would show the password."""
    argv = [*_celery(python), "flower", f"--address={host}", f"--port={port}"]
    if db is not None:
        argv += ["--persistent=True", f"--db={db}"]
    return argv


def flower_env(user: str, password: str) -> dict[str, str]:
    """Flower's API can run and revoke tasks: a login is required, and an unauthenticated API set in the
    caller's environment is switched off."""
    return {"FLOWER_BASIC_AUTH": f"{user}:{password}", "FLOWER_UNAUTHENTICATED_API": "false"}
