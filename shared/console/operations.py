"""The operations page: the maintenance jobs (schedule, last and next run), the tenant's recent runs, the queue
depths and the live workers, the tenant's channel connections and recent deliveries, and a job run now for one
of the tenant's users."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.channels.connections import list_connections
from shared.channels.deliveries import list_deliveries
from shared.console.paging import Page, make_page, page_bounds
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.redis_client import get_redis
from shared.infra.worker_heartbeats import WorkerBeat, live_workers, unserved_queues
from shared.maintenance.jobs import overview
from shared.maintenance.schedule import JOBS
from shared.queueing.dispatch import get_dispatcher
from shared.queueing.queues import QUEUES, queue_depths
from shared.turns.accept import find_user_id

# Page sizes of the two lists that grow: the runs (a few a day per job and user) and the deliveries.
RUNS_PAGE = 30
DELIVERIES_PAGE = 20

# The tenant's runs and the all-users runs, newest first. job_runs holds every tenant's runs: the
# (started_at, id) index yields them in the page's order and the scan stops once the page is full. Every day
# brings the all-users runs of each job, so a page is found within its last few days of runs, however many
# other tenants run jobs.
RUNS_SQL = """
SELECT r.job, r.period, r.scope, r.status, r.changed, r.counts, r.error, r.started_at, r.finished_at,
       u.external_id AS user_id
FROM job_runs r
LEFT JOIN users u ON u.id = CASE WHEN r.scope LIKE 'user:%%' THEN split_part(r.scope, ':', 3)::bigint END
WHERE r.scope = 'all' OR r.scope LIKE %(scope)s
ORDER BY r.started_at DESC, r.id DESC LIMIT %(limit)s OFFSET %(offset)s"""


@dataclass(frozen=True)
class Operations:
    jobs: list[dict[str, Any]]
    runs: Page
    queues: dict[str, int] | None  # None: the broker did not answer
    workers: list[WorkerBeat] | None  # None: Redis did not answer
    unserved: list[str]  # queues no live worker consumes
    # As the admin API lists them: a connection says which secrets are set, never their values; a delivery
    # leaves out the reply's text, and its error was redacted of the connection's secrets when stored.
    connections: list[dict[str, Any]]
    deliveries: Page


def operations(
    conn: Conn, settings: Settings, tenant_id: int, *, runs_page: int = 1, deliveries_page: int = 1
) -> Operations:
    """Every job's schedule and last all-users run, a page of the runs of every user of this tenant and the
    all-users runs (most recent first), how many messages wait in each queue, the workers with a live
    heartbeat, the tenant's channels and a page of their deliveries (newest first)."""
    runs_limit, runs_offset = page_bounds(runs_page, RUNS_PAGE)
    runs = conn.execute(
        RUNS_SQL, {"scope": f"user:{tenant_id}:%", "limit": runs_limit, "offset": runs_offset}
    ).fetchall()
    deliveries_limit, deliveries_offset = page_bounds(deliveries_page, DELIVERIES_PAGE)
    deliveries = list_deliveries(conn, tenant_id, limit=deliveries_limit, offset=deliveries_offset)
    try:
        depths: dict[str, int] | None = queue_depths(get_redis(), QUEUES)
    except Exception:  # the broker away: the page still shows the jobs
        depths = None
    try:
        workers: list[WorkerBeat] | None = live_workers(get_redis())
    except Exception:
        workers = None
    return Operations(
        jobs=overview(conn, settings),
        runs=make_page(runs, runs_page, RUNS_PAGE),
        queues=depths,
        workers=workers,
        unserved=[] if workers is None else unserved_queues(workers, QUEUES),
        connections=list_connections(conn, tenant_id),
        deliveries=make_page(deliveries, deliveries_page, DELIVERIES_PAGE),
    )


class RunRefused(ValueError):
    """A run-now request that names no job or no user of the tenant."""


def run_now(conn: Conn, tenant_id: int, job: str, user_external_id: str) -> None:
    """Queue the job for one user of the tenant (its run for today; a second one the same day does nothing)."""
    if job not in JOBS:
        raise RunRefused(f"unknown job {job!r}; jobs are {', '.join(JOBS)}")
    user_id = find_user_id(conn, tenant_id, user_external_id)
    if user_id is None:
        raise RunRefused(f"no user {user_external_id!r}")
    get_dispatcher().enqueue_job(job, tenant_id=tenant_id, user_id=user_id)
