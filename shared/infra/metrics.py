"""Prometheus metrics recorded where the work happens (worker pool processes).

Celery's prefork pool runs tasks in child processes, so these use prometheus_client's multiprocess
mode: the worker's main process points PROMETHEUS_MULTIPROC_DIR at a fresh directory before it forks
(workers/metrics.py), every child writes its samples there, and the main process serves the sum
on its own port. Every metric here has labels, so its values are created on first use — in the
child, after the mode was switched on.

Outside a worker (the CLI re-indexing, tests calling domain code) the same calls update ordinary
in-process metrics that nobody scrapes: harmless, and no code path needs to know where it runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Histogram

# Seconds: sub-second tasks and model calls up to long compactions and queue waits.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_LAG_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600)

TASK_SECONDS = Histogram(
    "engram_task_duration_seconds",
    "Celery task run time by task, queue and final state",
    ["task", "queue", "state"],
    buckets=_LATENCY_BUCKETS,
)
# By task only, so every series can exist (at 0) from the start: rate() and alerts see a first failure.
TASK_FAILURES = Counter("engram_task_failures", "Celery tasks that raised (the exception is in the log)", ["task"])
TASK_RETRIES = Counter("engram_task_retries", "Celery task retries scheduled", ["task"])

TURNS_FINISHED = Counter("engram_turns_finished", "Turns finished by a worker, by status", ["status"])
TURN_PHASE_SECONDS = Histogram(
    "engram_turn_phase_seconds",
    "Where a turn's time went: queued (accepted → picked up), model (LLM calls), overhead (engram's own work)",
    ["phase"],
    buckets=_LATENCY_BUCKETS,
)

LLM_CALLS = Counter(
    "engram_llm_calls", "LLM calls by purpose, provider, model and outcome", ["purpose", "provider", "model", "ok"]
)
LLM_TOKENS = Counter(
    "engram_llm_tokens",
    "LLM tokens by purpose, model and kind (input, output, cache_read, cache_write)",
    ["purpose", "model", "kind"],
)
LLM_COST = Counter(
    "engram_llm_cost_usd", "LLM spend in US dollars by purpose and model (ENGRAM_LLM_PRICES)", ["purpose", "model"]
)
LLM_SECONDS = Histogram(
    "engram_llm_call_duration_seconds",
    "LLM call time by purpose and model",
    ["purpose", "model"],
    buckets=_LATENCY_BUCKETS,
)

EXTRACTION_LAG = Histogram(
    "engram_extraction_lag_seconds",
    "Message stored → mined by extraction",
    ["role"],
    buckets=_LAG_BUCKETS,
)
EMBEDDING_LAG = Histogram(
    "engram_embedding_lag_seconds",
    "Memory written → embedded (searchable by vector)",
    ["source"],
    buckets=_LAG_BUCKETS,
)

# Model calls, counted where the cache sends its misses (workers, the gateway's query embedding, reindex):
# calls against texts shows how well the embedding queue batches.
EMBEDDING_CALLS = Counter("engram_embedding_calls", "Embedding model calls (one batch of texts each)", ["model"])
EMBEDDED_TEXTS = Counter("engram_embedded_texts", "Texts embedded by the model (embedding cache misses)", ["model"])


def observe_task(task: str, queue: str, state: str, seconds: float) -> None:
    TASK_SECONDS.labels(task, queue, state).observe(max(seconds, 0.0))


def count_task_failure(task: str) -> None:
    TASK_FAILURES.labels(task).inc()


def count_task_retry(task: str) -> None:
    TASK_RETRIES.labels(task).inc()


def preinitialize(tasks: Iterable[str]) -> None:
    """Zero-valued series for every task's failures and retries and each turn outcome, so a scrape
    shows them before the first event (a missing series reads as "no data", not as 0)."""
    for task in tasks:
        TASK_FAILURES.labels(task)
        TASK_RETRIES.labels(task)
    for status in ("done", "failed"):
        TURNS_FINISHED.labels(status)


def observe_turn(status: str, timings: Mapping[str, Any]) -> None:
    """From a finished turn's `timings` (shared/agent/turn_runner.py): queued_ms, llm_ms, overhead_ms."""
    TURNS_FINISHED.labels(status).inc()
    for phase, field in (("queued", "queued_ms"), ("model", "llm_ms"), ("overhead", "overhead_ms")):
        value = timings.get(field)
        if value is not None:
            TURN_PHASE_SECONDS.labels(phase).observe(max(float(value), 0.0) / 1000)


def observe_llm_call(
    purpose: str,
    provider: str,
    model: str,
    ok: bool,
    seconds: float,
    tokens: Mapping[str, int],
    cost_usd: float | None = None,
) -> None:
    LLM_CALLS.labels(purpose, provider, model, "true" if ok else "false").inc()
    if cost_usd is not None:
        LLM_COST.labels(purpose, model).inc(cost_usd)
    LLM_SECONDS.labels(purpose, model).observe(max(seconds, 0.0))
    for kind, count in tokens.items():
        if count:
            LLM_TOKENS.labels(purpose, model, kind).inc(count)


def observe_extraction_lag(lags: Iterable[tuple[str, float]]) -> None:
    for role, seconds in lags:
        EXTRACTION_LAG.labels(role).observe(max(seconds, 0.0))


def observe_embedding_lag(source: str, seconds: float) -> None:
    EMBEDDING_LAG.labels(source).observe(max(seconds, 0.0))


def observe_embedding_call(model: str, texts: int) -> None:
    EMBEDDING_CALLS.labels(model).inc()
    EMBEDDED_TEXTS.labels(model).inc(texts)
