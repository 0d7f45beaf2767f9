"""An in-memory OTLP/HTTP trace collector: the processes under test export real OTLP protobuf to it.

Spans from the gateway and worker processes cannot reach an in-process InMemorySpanExporter, so each
process exports over OTLP/HTTP (the path a deployment uses) to this receiver, which decodes the
requests and keeps the spans in memory for the test to inspect.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)  # trace ids of linked spans


class OTLPSink:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                sink._add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            service=str(resource.get("service.name", "")),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            name=s.name,
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            links=[link.trace_id.hex() for link in s.links],
                        )
                    )
        with self._lock:
            self.spans.extend(spans)

    def snapshot(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[Span]], bool], timeout: float = 60) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if check(spans):
                return spans
            names = sorted({s.name for s in spans})
            assert time.monotonic() < deadline, f"spans never satisfied the check; have {names}"
            time.sleep(0.1)

    def __enter__(self) -> OTLPSink:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
