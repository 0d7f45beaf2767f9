"""Prometheus metrics on the gateway's /metrics.

Postgres is the record of what the workers did (turns, LLM calls by purpose, memories), so the
gateway reads those aggregates at scrape time instead of every worker process exporting its own
counters; queue depths come from Redis. Celery task metrics (runtimes, failures per task) are
exported by Flower at its own /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shared import db
from shared.logging import get_logger
from shared.redis_client import get_redis
from workers.queues import QUEUES

log = get_logger(__name__)


class EngramCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        try:
            yield from self._from_postgres()
        except Exception as exc:  # a scrape must not fail because one source is down
            log.warning("metrics: postgres unavailable", error=str(exc))
        try:
            yield self._queue_depths()
        except Exception as exc:
            log.warning("metrics: redis unavailable", error=str(exc))

    def _from_postgres(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        calls = CounterMetricFamily("engram_llm_calls", "LLM calls by purpose", labels=["purpose", "provider", "ok"])
        tokens = CounterMetricFamily("engram_llm_tokens", "LLM tokens by purpose and kind", labels=["purpose", "kind"])
        turns = GaugeMetricFamily("engram_turns", "Turns by status", labels=["status"])
        memories = GaugeMetricFamily("engram_memories_active", "Active memories")
        with db.connection() as conn:
            for row in conn.execute(
                """SELECT purpose, provider, ok, count(*) AS n, sum(input_tokens) AS input,
                          sum(output_tokens) AS output, sum(cache_read_tokens) AS cache_read,
                          sum(cache_write_tokens) AS cache_write
                   FROM llm_calls GROUP BY purpose, provider, ok"""
            ):
                calls.add_metric([row["purpose"], row["provider"], str(row["ok"]).lower()], row["n"])
                for kind in ("input", "output", "cache_read", "cache_write"):
                    tokens.add_metric([row["purpose"], kind], int(row[kind] or 0))
            for row in conn.execute("SELECT status, count(*) AS n FROM turns WHERE kind = 'chat' GROUP BY status"):
                turns.add_metric([row["status"]], row["n"])
            active = conn.execute("SELECT count(*) AS n FROM memories WHERE valid_until IS NULL").fetchone()
            memories.add_metric([], active["n"] if active else 0)
        yield from (calls, tokens, turns, memories)

    def _queue_depths(self) -> GaugeMetricFamily:
        depth = GaugeMetricFamily("engram_queue_depth", "Messages waiting per Celery queue", labels=["queue"])
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        for queue in QUEUES:
            pipe.llen(queue)
        for queue, length in zip(QUEUES, pipe.execute(), strict=True):
            depth.add_metric([queue], length)
        return depth
