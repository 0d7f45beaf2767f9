"""Context that travels with a Celery message: the request id, and (gateway) the trace context.

The request id of the HTTP request (or task) that sends a message is written into its headers and
bound to the log context of the task that runs it (workers/base.py), so worker lines name the request
that caused them. Trace context: in workers the OpenTelemetry Celery instrumentation injects and
extracts it (shared/infra/tracing.py). The gateway sends tasks by name without registering them, and that
instrumentation only ends a publish span whose task it can look up by name, so the gateway uses the
small publish hook below instead.
"""

from __future__ import annotations

from typing import Any

import structlog
from celery.signals import before_task_publish

from shared.infra.tracing import inject_into, start_publish_span, tracing_on

REQUEST_ID_HEADER = "engram_request_id"


@before_task_publish.connect(weak=False)
def _carry_request_id(sender: Any = None, headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    if headers is not None and request_id and REQUEST_ID_HEADER not in headers:
        headers[REQUEST_ID_HEADER] = request_id


def _trace_publish(sender: Any = None, headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is None or not tracing_on():
        return
    with start_publish_span(str(sender)):
        inject_into(headers)


def install_publish_tracing() -> None:
    """For processes that send tasks without running them (the gateway)."""
    before_task_publish.connect(_trace_publish, weak=False, dispatch_uid="engram-publish-tracing")
