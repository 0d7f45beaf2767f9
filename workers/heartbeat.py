"""The worker's heartbeat (shared/infra/worker_heartbeats.py): a daemon thread in the main process, started when the
worker is ready to consume and stopped, its key removed, at shutdown. Pool children write none: one key per
worker, named by its node name."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutdown

from shared.infra.config import get_settings
from shared.infra.logging import get_logger
from shared.infra.redis_client import get_redis
from shared.infra.worker_heartbeats import WorkerBeat, forget, record

log = get_logger(__name__)


class Heartbeat:
    def __init__(
        self,
        hostname: str,
        queues: tuple[str, ...],
        interval_seconds: float,
        client: Callable[[], redis.Redis] = get_redis,
    ) -> None:
        self._client = client
        self.hostname = hostname
        self.queues = queues
        self.interval = interval_seconds
        self.started_at = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat_once(self) -> None:
        beat = WorkerBeat(self.hostname, os.getpid(), self.queues, self.started_at, time.time())
        record(self._client(), beat, self.interval)

    def _run(self) -> None:
        while True:
            try:
                self.beat_once()
            except Exception as exc:  # Redis away or slow: the worker goes on; the next interval tries again
                log.warning("worker heartbeat not written; retrying next interval", error=str(exc))
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
        try:
            forget(self._client(), self.hostname)
        except Exception as exc:  # the key expires on its own
            log.warning("worker heartbeat not removed at shutdown", error=str(exc))


_heartbeat: Heartbeat | None = None


@worker_ready.connect(weak=False)
def _start_heartbeat(sender: Any = None, **_: Any) -> None:
    global _heartbeat
    if sender is None or _heartbeat is not None:
        return
    queues = tuple(sorted(sender.app.amqp.queues.consume_from))
    _heartbeat = Heartbeat(str(sender.hostname), queues, get_settings().worker_heartbeat_seconds)
    _heartbeat.start()


@worker_shutdown.connect(weak=False)
def _stop_heartbeat(**_: Any) -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None
