"""The worker pool's Prometheus exporter and the Celery signals that feed it.

Multiprocess mode (prometheus_client), one exporter per pool: the worker's main process creates a
fresh PROMETHEUS_MULTIPROC_DIR before it forks its pool, the pool processes record task, turn, LLM
and lag metrics there (shared/infra/metrics.py), and the main process serves their sum on
ENGRAM_WORKER_METRICS_PORT. One scrape target per pool instance (a pod, a compose replica), whatever
its concurrency or how often its children are replaced — per-child exporters would come and go with
the children; a push gateway would keep dead workers' gauges. Gauges that describe the system rather
than a process are computed by the exporter at scrape time: the depth of every queue (Redis), and,
only in a pool that consumes `embeddings`, the embedding backlog (one SQL count, cached for
ENGRAM_METRICS_SQL_INTERVAL_SECONDS).

The exporter answers only a bearer API key with the `metrics` scope (the key /metrics on the
gateway takes), checked against Postgres and remembered for a minute.
"""

from __future__ import annotations

import hmac
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from celery.signals import (
    task_failure,
    task_postrun,
    task_prerun,
    task_retry,
    worker_init,
    worker_process_shutdown,
    worker_shutdown,
)
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from shared.access.auth import authenticate, hash_key
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.logging import get_logger
from shared.infra.metrics import count_task_failure, count_task_retry, observe_task, preinitialize
from shared.infra.redis_client import get_redis
from shared.queueing import task_names
from shared.queueing.queues import QUEUES, queue_depths

log = get_logger(__name__)

_started: dict[str, float] = {}  # task id → monotonic start, in the pool process running it


# ---- task signals (pool processes) ------------------------------------------------------------------


@task_prerun.connect(weak=False)
def _task_started(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        _started[task_id] = time.monotonic()


@task_postrun.connect(weak=False)
def _task_finished(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
    began = _started.pop(task_id or "", None)
    if began is None or task is None:
        return
    queue = (task.request.delivery_info or {}).get("routing_key") or getattr(task, "queue", None) or "unknown"
    observe_task(task.name, queue, state or "UNKNOWN", time.monotonic() - began)


@task_failure.connect(weak=False)
def _task_failed(sender: Any = None, **_: Any) -> None:
    count_task_failure(getattr(sender, "name", "unknown"))


@task_retry.connect(weak=False)
def _task_retried(sender: Any = None, **_: Any) -> None:
    count_task_retry(getattr(sender, "name", "unknown"))


# ---- scrape-time gauges (main process) -------------------------------------------------------------


class BrokerCollector(Collector):
    """Messages waiting in each engram queue (what KEDA scales on). Every pool reports every queue, so
    one scrape shows the whole backlog (a pool's own queues and the ones it feeds); dashboards take
    `max by (queue)` over the pools."""

    def __init__(self, queues: Iterable[str] = QUEUES) -> None:
        self.queues = list(queues)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("engram_queue_depth", "Messages waiting per Celery queue", labels=["queue"])
        try:
            waiting = queue_depths(get_redis(), self.queues)
        except Exception as exc:  # a scrape must not fail because Redis is away
            log.warning("metrics: redis unavailable", error=str(exc))
            return
        for queue, count in waiting.items():
            depth.add_metric([queue], count)
        yield depth


class EmbeddingBacklogCollector(Collector):
    """Active memories without chunks: written but not yet searchable by vector. Cached SQL."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._value: int | None = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def _count(self) -> int:
        with db.connection() as conn:
            row = conn.execute(
                """SELECT count(*) AS n FROM memories m WHERE m.valid_until IS NULL
                   AND NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)"""
            ).fetchone()
        return int(row["n"]) if row else 0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if self.clock() - self._at >= self.interval:
                try:
                    self._value = self._count()
                    self._at = self.clock()
                except Exception as exc:
                    log.warning("metrics: postgres unavailable", error=str(exc))
            value = self._value
        if value is not None:
            yield GaugeMetricFamily("engram_embedding_backlog", "Active memories not yet embedded", value=value)


# ---- the exporter (main process) ----------------------------------------------------------------------


class _KeyCheck:
    """Bearer key with the `metrics` scope; a valid key's hash is trusted for `ttl` seconds."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._ok: dict[str, float] = {}
        self._lock = threading.Lock()

    def status(self, authorization: str | None) -> int:
        if not authorization or not authorization.lower().startswith("bearer "):
            return 401
        key = authorization[7:].strip()
        digest = hash_key(key)
        now = time.monotonic()
        with self._lock:
            if any(hmac.compare_digest(digest, known) for known, until in self._ok.items() if until > now):
                return 200
        try:
            with db.connection() as conn:
                principal = authenticate(conn, key)
        except db.DatabaseUnavailable:
            return 503
        if principal is None:
            return 401
        if not principal.allows("metrics"):
            return 403
        with self._lock:
            self._ok = {k: t for k, t in self._ok.items() if t > now}
            self._ok[digest] = now + self.ttl
        return 200


def build_registry(queues: Iterable[str], sql_interval: float, multiproc_dir: str) -> CollectorRegistry:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=multiproc_dir)
    queues = list(queues)
    registry.register(BrokerCollector())
    if "embeddings" in queues:
        registry.register(EmbeddingBacklogCollector(sql_interval))
    return registry


def serve(registry: CollectorRegistry, host: str, port: int, check: _KeyCheck) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self._reply(404, b"not found\n", "text/plain")
                return
            code = check.status(self.headers.get("Authorization"))
            if code != 200:
                reasons = {401: b"a bearer API key is required\n", 403: b"the key lacks the metrics scope\n"}
                self._reply(code, reasons.get(code, b"unavailable\n"), "text/plain")
                return
            self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="engram-metrics"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics-exporter", daemon=True).start()
    return server


_multiproc_dir: str | None = None


@worker_init.connect(weak=False)
def _start_exporter(sender: Any = None, **_: Any) -> None:
    """Before the pool forks: switch prometheus_client to multiprocess mode and serve the sum."""
    global _multiproc_dir
    settings = get_settings()
    if settings.worker_metrics_port is None:
        return
    _multiproc_dir = tempfile.mkdtemp(prefix="engram-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _multiproc_dir
    values.ValueClass = values.MultiProcessValue()
    if sender is not None:
        preinitialize(name for name in sender.app.tasks if name.startswith(task_names.PREFIX))
    queues = list(sender.app.amqp.queues.consume_from) if sender is not None else []
    registry = build_registry(queues, settings.metrics_sql_interval_seconds, _multiproc_dir)
    server = serve(registry, settings.worker_metrics_host, settings.worker_metrics_port, _KeyCheck())
    log.info(
        "worker metrics exporter listening",
        address=f"{settings.worker_metrics_host}:{server.server_address[1]}",
        queues=sorted(queues),
    )


@worker_process_shutdown.connect(weak=False)
def _child_gone(pid: int | None = None, **_: Any) -> None:
    if _multiproc_dir is not None:
        mark_process_dead(pid or os.getpid(), _multiproc_dir)


@worker_shutdown.connect(weak=False)
def _remove_dir(**_: Any) -> None:
    if _multiproc_dir is not None:
        shutil.rmtree(_multiproc_dir, ignore_errors=True)
