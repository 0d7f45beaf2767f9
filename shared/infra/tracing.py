"""OpenTelemetry tracing: off unless ENGRAM_OTEL_ENABLED, spans exported over OTLP/HTTP.

One trace follows a turn: the gateway's request span (FastAPI), its SQL (psycopg) and Redis calls,
the publish of the drain task, the Celery task that runs the turn, the model call (the Anthropic SDK's
own span, and the HTTP request under it from the httpx2 instrumentation, which the OpenAI SDK gets
too), the SQL the turn ran, and the follow-up tasks it scheduled (extraction, embeddings), whose
spans are children of the turn's task through the trace context carried in the message headers.

Sampling: a span with no parent starts a trace only if it is a request, a task or a publish. Redis
and SQL calls outside any of those — the broker polling its queues every second, the pool's
connection checks — would otherwise each make a one-span trace.

Privacy: no instrumentation is asked to record message text or SQL parameters (the Anthropic SDK's
content capture is off by default and stays off; psycopg's `capture_parameters` is not set). A test
checks that no span attribute holds the text of a turn.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import SpanKind

from shared.infra.config import Settings, get_settings

_lock = threading.Lock()
_configured_role: str | None = None


def parse_headers(raw: str) -> dict[str, str]:
    """`name=value,name=value` → dict (values may contain `=`). Empty entries are ignored."""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"ENGRAM_OTEL_HEADERS entry {name.strip()!r} is not name=value")
        headers[name.strip()] = value.strip()
    return headers


def traces_endpoint(settings: Settings) -> str | None:
    """The OTLP/HTTP traces URL, or None for the exporter's own default (OTEL_EXPORTER_OTLP_* or localhost)."""
    if not settings.otel_endpoint:
        return None
    base = settings.otel_endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def configure_tracing(role: str, settings: Settings | None = None) -> bool:
    """Install this process's tracer provider and the library instrumentations. Returns whether tracing is on.

    Called once per process: by the gateway's app factory, and by each Celery pool process after the
    fork (a batch exporter's thread does not survive a fork). A second call is a no-op."""
    global _configured_role
    settings = settings or get_settings()
    if not settings.otel_enabled:
        return False
    with _lock:
        if _configured_role is not None:
            return True
        _install(role, settings)
        _configured_role = role
    return True


def tracing_on() -> bool:
    return _configured_role is not None


def _install(role: str, settings: Settings) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    headers = parse_headers(settings.otel_headers.get_secret_value()) if settings.otel_headers else None
    resource = Resource.create({"service.name": f"{settings.otel_service_name}-{role}", "engram.process": role})
    sampler = ParentBased(root=_EntryPointsOnly(TraceIdRatioBased(settings.otel_sample_ratio)))
    provider = TracerProvider(resource=resource, sampler=sampler)
    exporter = OTLPSpanExporter(endpoint=traces_endpoint(settings), headers=headers)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    PsycopgInstrumentor().instrument()
    RedisInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument()  # embeddings endpoint, anything on plain httpx
    HTTPX2ClientInstrumentor().instrument()  # the anthropic and openai SDKs run on httpx2


class _EntryPointsOnly(Sampler):
    """A root sampler that starts traces only at entry points (server, consumer, producer spans) and
    leaves the decision among those to `inner` (the ratio)."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Any] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if kind not in (SpanKind.SERVER, SpanKind.CONSUMER, SpanKind.PRODUCER):
            return SamplingResult(Decision.DROP)
        return self.inner.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"EntryPointsOnly({self.inner.get_description()})"


def instrument_fastapi(app: Any) -> None:
    """Server spans for every route but the probes and the scrape endpoint (they would drown the rest)."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app, excluded_urls="/healthz,/readyz,/metrics", exclude_spans=["receive", "send"]
    )


def instrument_celery_worker() -> None:
    """Consumer spans for every task, continuing the trace in the message headers; publishes from a
    task (follow-up work, retries) become its children. Only in processes where the tasks are
    registered: the instrumentation ends a publish span by looking the task up by name."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument()


def current_trace_ids() -> dict[str, str]:
    """trace_id / span_id of the active span (for log lines), or {} when there is none."""
    if _configured_role is None:
        return {}
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def inject_into(headers: dict[str, Any]) -> None:
    """Write the current trace context into a message's headers (W3C traceparent)."""
    if _configured_role is None:
        return
    from opentelemetry.propagate import inject

    inject(headers)


def start_publish_span(task_name: str) -> Any:
    """A producer span for a task sent by name from a process that does not register it (the gateway)."""
    from opentelemetry import trace

    return trace.get_tracer("engram").start_as_current_span(
        f"apply_async/{task_name}",
        kind=trace.SpanKind.PRODUCER,
        attributes={"celery.task_name": task_name, "messaging.system": "celery"},
    )


def turn_span(turn_id: int, session_id: int, attempt: int) -> Any:
    """An internal span around one turn inside a drain task (a task may run several queued turns)."""
    from contextlib import nullcontext

    if _configured_role is None:
        return nullcontext()
    from opentelemetry import trace

    return trace.get_tracer("engram").start_as_current_span(
        "engram.turn",
        attributes={"engram.turn_id": turn_id, "engram.session_id": session_id, "engram.attempt": attempt},
    )
