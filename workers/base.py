"""The single task decorator every engram task uses (one place for routing and logging).

`engram_task("turns")` registers `engram.turns.<function name>` on the `turns` queue and binds
task id, queue and the task's keyword arguments (session_id, turn_id, …) to the structlog
context for every line logged while it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import structlog
from celery import Task

from workers.app import app
from workers.queues import QUEUES

F = TypeVar("F", bound=Callable[..., Any])

_CONTEXT_KEYS = ("session_id", "turn_id", "user_id")


def engram_task(queue: str, **options: Any) -> Callable[[F], Task]:
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")

    def decorate(fn: F) -> Task:
        name = f"engram.{queue}.{fn.__name__}"

        @wraps(fn)
        def run(self: Task, *args: Any, **kwargs: Any) -> Any:
            context = {key: kwargs[key] for key in _CONTEXT_KEYS if key in kwargs}
            with structlog.contextvars.bound_contextvars(
                task_id=self.request.id, task=name, queue=queue, retries=self.request.retries, **context
            ):
                return fn(*args, **kwargs)

        return app.task(bind=True, name=name, queue=queue, **options)(run)

    return decorate
