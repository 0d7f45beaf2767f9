"""Benchmarks that stand in for `engram up` run its worker layout, pool sizes included."""

from __future__ import annotations

from ops.bench.stack import up_workers
from shared.infra.config import Settings
from shared.queueing.queues import BACKGROUND_QUEUES, INTERACTIVE_QUEUES


def test_up_workers_default_to_engram_ups_processes() -> None:
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    turns, background = up_workers()
    assert (turns.queues, turns.concurrency) == (INTERACTIVE_QUEUES, defaults.turn_worker_concurrency)
    assert (background.queues, background.concurrency) == (BACKGROUND_QUEUES, defaults.background_worker_concurrency)
    assert [w.concurrency for w in up_workers(1, 3)] == [1, 3]
