"""How long a task's message can stay unacknowledged, checked against the broker's visibility timeout.

With the Redis transport, a message a worker has taken but not acknowledged is handed to another worker
once `visibility_timeout` passes. Tasks are `acks_late`, so a message stays unacknowledged while it waits
for its countdown on the worker (a retry's backoff, a debounced task's delay) and then while it runs (up to
the time limit). If that can exceed the visibility timeout, the same task runs twice at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.infra.config import Settings

# Celery's defaults (celery.app.task.Task and celery.app.autoretry) for options a task does not set.
CELERY_MAX_RETRIES = 3
CELERY_RETRY_BACKOFF_MAX = 600
CELERY_DEFAULT_RETRY_DELAY = 180


def longest_retry_countdown(options: Mapping[str, Any]) -> float:
    """The longest countdown Celery's autoretry can give one retry of a task declared with `options`.

    Retry n (0-based) waits min(retry_backoff_max, factor × 2ⁿ) — jitter only shortens it — for n up to
    max_retries − 1; without `retry_backoff` every retry waits `default_retry_delay`. Each retry is a new
    message, so the longest single countdown matters, not their sum."""
    if not options.get("autoretry_for"):
        return 0.0
    max_retries = options.get("max_retries", CELERY_MAX_RETRIES)
    if max_retries is not None and max_retries < 1:
        return 0.0
    backoff = options.get("retry_backoff", False)
    if not backoff:
        return float(options.get("default_retry_delay", CELERY_DEFAULT_RETRY_DELAY))
    factor = int(max(1.0, float(backoff)))
    cap = int(options.get("retry_backoff_max", CELERY_RETRY_BACKOFF_MAX))
    if max_retries is None:  # retries forever: the cap is reached
        return float(cap)
    return float(min(cap, factor * 2 ** (max_retries - 1)))


def longest_hold(options: Mapping[str, Any], settings: Settings, countdown: float = 0.0) -> float:
    """Seconds a message of this task can stay unacknowledged: its longest countdown, then a whole run."""
    time_limit = options.get("time_limit") or settings.turn_time_limit
    return max(countdown, longest_retry_countdown(options)) + float(time_limit)


def check_visibility_timeout(name: str, options: Mapping[str, Any], settings: Settings, countdown: float = 0.0) -> None:
    """Refuse (ValueError, at worker start) a task the broker could redeliver while it still waits or runs.

    `countdown`: the longest delay the task is ever sent with (e.g. the extraction debounce)."""
    hold = longest_hold(options, settings, countdown)
    if hold < settings.broker_visibility_timeout:
        return
    waits = max(countdown, longest_retry_countdown(options))
    raise ValueError(
        f"ENGRAM_BROKER_VISIBILITY_TIMEOUT ({settings.broker_visibility_timeout} s) is too short for task {name}: "
        f"it can wait {waits:g} s for its countdown (retry backoff or delay) and then run for up to "
        f"{hold - waits:g} s (ENGRAM_TURN_TIME_LIMIT) before it is acknowledged, and the broker would hand it "
        f"to a second worker meanwhile. Set ENGRAM_BROKER_VISIBILITY_TIMEOUT above {hold:g}."
    )
