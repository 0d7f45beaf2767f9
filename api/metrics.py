"""Prometheus metrics on the gateway's /metrics.

The gateway's own: requests by route, method and status, and their latency (RequestMetrics below).
System gauges: queue depths (Redis, every scrape: a few LLEN), turns by status and active memories
(cross-tenant SQL, recomputed at most every ENGRAM_METRICS_SQL_INTERVAL_SECONDS per gateway, so a
scraper — or several — cannot turn /metrics into a load on Postgres). Work done by workers (tasks,
turn latency split, LLM calls and tokens, extraction and embedding lag) is counted where it happens
and served by each worker pool's exporter (workers/metrics.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.infra import db
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.infra.replicas import read_counts
from shared.queueing.queues import QUEUES, queue_depths

log = get_logger(__name__)


class EngramCollector(Collector):
    def __init__(self, sql_interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.sql_interval = sql_interval
        self.clock = clock
        self._lock = threading.Lock()
        self._sql: tuple[dict[str, int], int] | None = None
        self._sql_at = float("-inf")
        self._jobs_families: list[CounterMetricFamily | GaugeMetricFamily] = []

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        sql = self._postgres_aggregates()
        if sql is not None:
            by_status, active = sql
            turns = GaugeMetricFamily("engram_turns", "Turns by status (all tenants; cached)", labels=["status"])
            for status, count in sorted(by_status.items()):
                turns.add_metric([status], count)
            yield turns
            yield GaugeMetricFamily("engram_memories_active", "Active memories (all tenants; cached)", value=active)
            yield from self._jobs_families
        routed = read_counts()
        if routed:  # replicas configured
            reads = CounterMetricFamily(
                "engram_db_reads",
                "Reads that may use a replica, by where they ran (replica, primary) and why",
                labels=["target", "reason"],
            )
            for (target, reason), count in sorted(routed.items()):
                reads.add_metric([target, reason], count)
            yield reads
        try:
            yield self._queue_depths()
        except Exception as exc:  # a scrape must not fail because one source is down
            log.warning("metrics: redis unavailable", error=str(exc))

    def _postgres_aggregates(self) -> tuple[dict[str, int], int] | None:
        with self._lock:
            if self.clock() - self._sql_at >= self.sql_interval:
                try:
                    with db.connection() as conn:
                        rows = conn.execute(
                            "SELECT status, count(*) AS n FROM turns WHERE kind = 'chat' GROUP BY status"
                        ).fetchall()
                        active = conn.execute("SELECT count(*) AS n FROM memories WHERE valid_until IS NULL").fetchone()
                        self._jobs_families = list(self._jobs(conn))
                    self._sql = ({row["status"]: int(row["n"]) for row in rows}, int(active["n"]) if active else 0)
                    self._sql_at = self.clock()
                except Exception as exc:
                    log.warning("metrics: postgres unavailable", error=str(exc))
            return self._sql

    @staticmethod
    def _jobs(conn: db.Conn) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Maintenance jobs, from job_runs: runs by status, and the latest run's duration, changes and counts."""
        runs = CounterMetricFamily("engram_job_runs", "Maintenance job runs by status", labels=["job", "status"])
        duration = GaugeMetricFamily(
            "engram_job_last_duration_seconds", "Duration of the latest finished all-users run", labels=["job"]
        )
        changed = GaugeMetricFamily(
            "engram_job_last_changed", "Memories the latest run created, superseded or removed", labels=["job"]
        )
        counts = GaugeMetricFamily(
            "engram_job_last_count",
            "Counts of the latest all-users run (examined, decayed, …)",
            labels=["job", "count"],
        )
        for row in conn.execute("SELECT job, status, count(*) AS n FROM job_runs GROUP BY job, status"):
            runs.add_metric([row["job"], row["status"]], row["n"])
        for row in conn.execute(
            """SELECT DISTINCT ON (job) job, changed, counts,
                      extract(epoch FROM finished_at - started_at) AS seconds
               FROM job_runs WHERE scope = 'all' AND status = 'done' ORDER BY job, finished_at DESC"""
        ):
            duration.add_metric([row["job"]], float(row["seconds"]))
            changed.add_metric([row["job"]], row["changed"])
            for name, value in sorted(row["counts"].items()):
                counts.add_metric([row["job"], name], value)
        yield from (runs, duration, changed, counts)

    def _queue_depths(self) -> GaugeMetricFamily:
        depth = GaugeMetricFamily("engram_queue_depth", "Messages waiting per Celery queue", labels=["queue"])
        for queue, waiting in queue_depths(get_redis(), QUEUES).items():
            depth.add_metric([queue], waiting)
        return depth


class RequestMetrics:
    """Requests and their latency by route template (never the raw path: ids would explode the labels)."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "engram_http_requests",
            "Gateway requests by route, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "engram_http_request_duration_seconds",
            "Gateway request latency until the response starts (streams: until their first byte)",
            ["route", "method"],
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self.seconds.labels(_route(scope), scope["method"]).observe(time.monotonic() - began)
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            self.requests.labels(_route(scope), scope["method"], str(status)).inc()


def _route(scope: Scope) -> str:
    route = scope.get("route")
    return str(getattr(route, "path", None) or "unmatched")
