"""One trace per turn, across processes: gateway request → drain task → model call and SQL → the
extraction task it scheduled. The gateway and the worker run as real processes exporting OTLP/HTTP to
an in-memory collector (tests/support/otlp.py). And the logs of the same turn: JSON lines carrying
the request, task, turn and session ids, with no message text and no key in them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.embedded import free_port
from ops.fake_llm import FakeLLM
from tests.conftest import CeleryStack, make_key, wait_turn
from tests.integration.test_pipeline import eventually, responder
from tests.support.otlp import OTLPSink, Span
from tests.support.processes import CeleryProcess, gateway, wait_http

pytestmark = pytest.mark.integration

SERVER, CONSUMER = 2, 5  # OTLP SpanKind values
MARKER = "zebra-crossing-7731"  # in the turn's text: must appear in no span and no log line


@pytest.fixture(scope="module")
def sink() -> Iterator[OTLPSink]:
    with OTLPSink() as collector:
        yield collector


def traced_env(sink: OTLPSink) -> dict[str, str]:
    return {
        "ENGRAM_OTEL_ENABLED": "true",
        "ENGRAM_OTEL_ENDPOINT": sink.url,
        "ENGRAM_LOG_JSON": "true",
        "ENGRAM_LOG_LEVEL": "INFO",
        "ENGRAM_AUTO_MEMORY": "true",
        "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "0",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 0.1 s instead of 5 s
        # The suite's 5 s stalled-turn timer lets the sweep re-drive a turn that merely waited in a busy queue;
        # its drain (a trace of its own) could then run the turn, leaving the request's trace without it.
        "ENGRAM_STALLED_TURN_SECONDS": "600",
    }


@pytest.fixture
def traced(
    celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM, sink: OTLPSink, tmp_path: Path
) -> Iterator[tuple[CeleryStack, CeleryProcess]]:
    fake_llm.default = responder()
    env = traced_env(sink)
    celery_stack.ensure("anthropic", **env)
    port = free_port()
    gw = gateway(celery_stack.env("anthropic", env), tmp_path, port).start()
    gw.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    try:
        wait_http(gw, f"{gw.url}/healthz")  # type: ignore[attr-defined]
        yield celery_stack, gw
    finally:
        gw.stop()


def post(gw: CeleryProcess, key: str, text: str, request_id: str) -> tuple[httpx.Client, dict[str, Any]]:
    client = httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)  # type: ignore[attr-defined]
    response = client.post(
        "/v1/sessions/traced/turns", json={"user_id": "alice", "text": text}, headers={"X-Request-ID": request_id}
    )
    assert response.status_code == 202, response.text
    assert response.headers["X-Request-ID"] == request_id
    return client, response.json()


def ancestors(span: Span, by_id: dict[str, Span]) -> list[Span]:
    chain = []
    while span.parent_id and span.parent_id in by_id:
        span = by_id[span.parent_id]
        chain.append(span)
    return chain


def test_a_turn_is_one_linked_trace(traced: tuple[CeleryStack, CeleryProcess], sink: OTLPSink) -> None:
    _stack, gw = traced
    client, accepted = post(gw, make_key("tenant-a"), f"Hello, remember {MARKER}", "req-trace-1")
    try:
        assert wait_turn(client, accepted["turn_id"])["status"] == "done"
    finally:
        client.close()

    def request_span(spans: list[Span]) -> Span | None:
        return next(
            (
                s
                for s in spans
                if s.kind == SERVER
                and s.service == "engram-gateway"
                and s.attributes.get("http.route") == "/v1/sessions/{session_key}/turns"
            ),
            None,
        )

    def complete(spans: list[Span]) -> bool:
        root = request_span(spans)
        if root is None:
            return False
        trace = [s for s in spans if s.trace_id == root.trace_id]
        ids = {s.span_id for s in trace}
        # Spans arrive in batches, a parent after its children: wait until none is missing.
        return {"run/engram.turns.drain", "run/engram.extraction.extract", "engram.turn"} <= {
            s.name for s in trace
        } and all(s.parent_id in ids for s in trace if s is not root)

    # The extraction sends the embedding of what it stored, in this trace too; on a busy machine that task
    # (loading the embedder first) can take minutes, and the trace is complete only when its span is in.
    spans = sink.wait_for(complete, timeout=240)
    root = request_span(spans)
    assert root is not None
    trace = [s for s in spans if s.trace_id == root.trace_id]
    by_id = {s.span_id: s for s in trace}

    # Linked: every span of the trace hangs off the gateway's request span, none is orphaned.
    for span in trace:
        if span is not root:
            assert root in ancestors(span, by_id), f"{span.name} ({span.service}) is not under the request span"

    drain = next(s for s in trace if s.name == "run/engram.turns.drain")
    assert drain.service == "engram-worker" and drain.kind == CONSUMER
    turn = next(s for s in trace if s.name == "engram.turn")
    assert turn.attributes["engram.turn_id"] == accepted["turn_id"]
    assert drain in ancestors(turn, by_id)
    # The model call: the SDK's span and the HTTP request to the (fake) Anthropic API, under the turn.
    model_calls = [s for s in trace if turn in ancestors(s, by_id) and s.name.startswith("anthropic.messages")]
    assert model_calls, sorted({s.name for s in trace})
    http_calls = [s for s in trace if turn in ancestors(s, by_id) and s.name == "POST"]
    assert http_calls and all("/v1/messages" in str(s.attributes.get("http.url", "")) for s in http_calls)
    # SQL on both sides: the gateway's insert, the worker's turn.
    sql = [s for s in trace if s.attributes.get("db.system") == "postgresql"]
    assert any(s.service == "engram-gateway" for s in sql)
    assert any(turn in ancestors(s, by_id) for s in sql)
    # The extraction it scheduled continues the same trace, under the drain task that sent it.
    extraction = next(s for s in trace if s.name == "run/engram.extraction.extract")
    assert drain in ancestors(extraction, by_id)
    # Probes and scrapes make no traces; broker polling makes no one-span traces.
    assert not any(s.attributes.get("http.route") in ("/healthz", "/readyz") for s in spans)
    assert all(s.parent_id or s.kind in (SERVER, CONSUMER, 4) for s in spans), "a root span that is no entry point"
    # What the user said is in no span.
    assert not [s.name for s in spans if MARKER in json.dumps(s.attributes, default=str)]


def json_lines(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_bytes()[offset:].decode(errors="replace").splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_logs_carry_ids_and_no_text(traced: tuple[CeleryStack, CeleryProcess]) -> None:
    stack, gw = traced
    assert stack.worker is not None
    key = make_key("tenant-a")
    start = stack.worker.log_path.stat().st_size  # the worker (and its log) may have served earlier tests
    client, accepted = post(gw, key, f"My locker code is {MARKER}", "req-logs-1")
    try:
        assert wait_turn(client, accepted["turn_id"])["status"] == "done"
    finally:
        client.close()
    gateway_lines = json_lines(gw.log_path)
    worker_log = stack.worker.log_path
    # The turn is visible as done a moment before its worker logs the line: wait for the line.
    eventually(lambda: any(line.get("event") == "turn done" for line in json_lines(worker_log, start)))
    worker_lines = json_lines(worker_log, start)

    accepted_line = next(line for line in gateway_lines if line.get("event") == "turn accepted")
    assert accepted_line["request_id"] == "req-logs-1"
    assert accepted_line["turn_id"] == accepted["turn_id"]
    assert accepted_line["session_id"] == accepted["session_id"]
    assert len(accepted_line["trace_id"]) == 32  # tracing is on: lines name their trace

    done = next(
        line for line in worker_lines if line.get("event") == "turn done" and line.get("turn_id") == accepted["turn_id"]
    )
    # The worker's line names the request that caused it, the task, the turn and the session.
    assert done["request_id"] == "req-logs-1"
    assert done["session_id"] == accepted["session_id"] and done["task"] == "engram.turns.drain"
    assert done["task_id"]
    # Every line a task wrote while it ran carries its task id (lines from Celery itself included).
    task_lines = [line for line in worker_lines if line.get("request_id") == "req-logs-1"]
    assert task_lines and all(line.get("task_id") for line in task_lines)

    for path in (gw.log_path, stack.worker.log_path):
        text = path.read_text(errors="replace")
        assert MARKER not in text, f"message text in {path.name}"
        assert key not in text, f"API key in {path.name}"
