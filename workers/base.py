"""The single task decorator every engram task uses (one place for routing and logging).

`engram_task("turns")` registers `engram.turns.<function name>` (listed in shared/queueing/task_names.py) on the
`turns` queue and binds task id, queue and the task's keyword arguments (session_id, turn_id, …) to the structlog
context for every line logged while it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import structlog
from celery import Task

from shared.infra.config import Settings, get_settings
from shared.infra.locks import HeartbeatLock
from shared.infra.redis_client import get_redis
from shared.queueing.queues import QUEUES
from shared.queueing.task_names import ALL as TASK_NAMES
from shared.queueing.task_names import task_name
from workers.app import app
from workers.limits import check_visibility_timeout
from workers.tracing import REQUEST_ID_HEADER

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
CountdownOf = Callable[[Settings], float]

_CONTEXT_KEYS = ("session_id", "turn_id", "user_id")

# Every engram task's Celery options and longest send countdown, by task name.
DECLARED: dict[str, tuple[dict[str, Any], CountdownOf | None]] = {}


def check_declared(settings: Settings) -> None:
    """The visibility-timeout check of every task declared so far (ValueError naming the first misfit)."""
    for name, (options, countdown_of) in DECLARED.items():
        check_visibility_timeout(name, options, settings, countdown_of(settings) if countdown_of else 0.0)


def engram_task(queue: str, *, max_countdown: CountdownOf | None = None, **options: Any) -> Callable[[F], Task]:
    """`max_countdown`: the longest delay the task is ever sent with, from the settings (debounced tasks).

    A worker refuses to start (ValueError at import) when a task's longest retry backoff or countdown plus
    its time limit reaches the broker's visibility timeout (workers/limits.py)."""
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")

    def decorate(fn: F) -> Task:
        name = task_name(queue, fn.__name__)
        if name not in TASK_NAMES:  # senders use the constants: a name missing there is never sent
            raise ValueError(f"task {name} is not listed in shared/queueing/task_names.py")
        settings = get_settings()
        check_visibility_timeout(name, options, settings, max_countdown(settings) if max_countdown else 0.0)
        DECLARED[name] = (dict(options), max_countdown)

        @wraps(fn)
        def run(self: Task, *args: Any, **kwargs: Any) -> Any:
            context = {key: kwargs[key] for key in _CONTEXT_KEYS if key in kwargs}
            request_id = self.request.get(REQUEST_ID_HEADER)
            if request_id:
                context["request_id"] = request_id
            with structlog.contextvars.bound_contextvars(
                task_id=self.request.id, task=name, queue=queue, retries=self.request.retries, **context
            ):
                return fn(*args, **kwargs)

        return app.task(bind=True, name=name, queue=queue, **options)(run)

    return decorate


def alone_on_session(job: str, session_id: int, work: Callable[[], T]) -> T | None:
    """`work`'s result, run holding the session's `job` lock (one compaction, flush, extraction or consolidation
    of a session at a time, kept alive while it runs); None, without running it, while another worker holds it."""
    lock = HeartbeatLock(get_redis(), f"engram:lock:{job}:{session_id}", get_settings().session_lock_ttl_seconds)
    if not lock.acquire():
        return None
    try:
        return work()
    finally:
        lock.release()
