"""A local fake LLM server that speaks the OpenAI and Anthropic wire formats.

Tests script the replies (`fake.script(FakeReply(...))`) and inspect what the real SDKs sent
(`fake.requests`); benchmarks run it as a stand-in with a fixed latency:

    python -m ops.fake_llm --port 8999 --latency-ms 300

Token counts are estimates (about four characters per token); the prompt-cache accounting follows
the real rules — prefix match per breakpoint, minimum cacheable length per model family, 5-minute
TTL, 20-block lookback, at most 4 breakpoints — stated and tested in ops/fake_cache.py.

engram sends its per-request context after the conversation, wrapped in `<turn-context>` tags (a text
block of its own on Anthropic, appended to the last message on OpenAI); it is not the user's text, so
`user_texts`, `last_user_text` and echo replies leave it out.

`POST /v1/embeddings` (OpenAI format) returns deterministic hashed bag-of-words vectors
(`fake_embedding`): texts sharing words get similar vectors. It honours `dimensions` and
`encoding_format`; failures are scripted on their own queue, `fake.script_embeddings(FakeReply(status=429))`,
so embedding calls never consume the chat script.

The replies and their wire formats are fake_llm_replies.py's; this module is the server that scripts,
records and serves them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ops.fake_cache import AnthropicCache, CacheRuleError, OpenAICache
from ops.fake_llm_replies import (
    BoundReply,
    FakeReply,
    Json,
    RecordedRequest,
    WireFormat,
    anthropic_events,
    anthropic_json,
    echo_reply,
    embedding_inputs,
    engram_tail,
    error_body,
    fake_embedding,
    last_user_text,
    openai_chunks,
    openai_embeddings_json,
    openai_json,
    user_texts,
)
from ops.fake_server import FakeServer

# Tests and benchmarks import the fake from here: the server, the reply record and the request helpers.
__all__ = [
    "FakeLLM",
    "FakeReply",
    "Json",
    "RecordedRequest",
    "echo_reply",
    "engram_tail",
    "fake_embedding",
    "last_user_text",
    "user_texts",
]

HOLD_LIMIT_S = 60.0  # a held reply goes out after this even if its test never releases it


class _BrokenStream(Exception):
    """Raised inside a streaming body to make the server drop the connection mid-reply."""


# ---------------------------------------------------------------------------------------------------
# Server


class FakeLLM(FakeServer):
    label = "fake LLM"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        openai_cache_min_tokens: int = 1024,
        anthropic_cache_min_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep_requests: int | None = None,
    ) -> None:
        """`anthropic_cache_min_tokens` None: the model family's minimum (fake_cache.min_cacheable_tokens).
        `clock` drives the caches' TTL; tests pass a settable one. `keep_requests`: how many of the latest
        requests `requests` holds (None: all, for tests; a long benchmark would grow without bound)."""
        self.latency_s = latency_s  # added to every reply, for benchmarks
        self.default: Callable[[Json], FakeReply] = echo_reply
        self._lock = threading.Lock()
        self._script: deque[FakeReply] = deque()
        self._embedding_script: deque[FakeReply] = deque()
        self._requests: deque[RecordedRequest] = deque(maxlen=keep_requests)
        self._serials = itertools.count(1)
        self.clock = clock
        self._anthropic_cache = AnthropicCache(anthropic_cache_min_tokens, clock=clock)
        self._openai_cache = OpenAICache(openai_cache_min_tokens, clock=clock)
        routes = [
            Route("/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/v1/messages", self._anthropic, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route("/healthz", self._healthz, methods=["GET"]),
        ]
        super().__init__(Starlette(routes=routes), host=host, port=port)

    # -- scripting ------------------------------------------------------------------------------

    def script(self, *replies: FakeReply, match: str | None = None) -> None:
        """Queue replies in order; with `match`, each is only for requests whose user messages contain it."""
        if match is not None:
            replies = tuple(replace(reply, match=match) for reply in replies)
        with self._lock:
            self._script.extend(replies)

    def script_embeddings(self, *replies: FakeReply) -> None:
        """Queue outcomes for the next embedding requests; only status, error_body, headers and
        delay_s are used. Unscripted requests succeed."""
        with self._lock:
            self._embedding_script.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_matching(self, text: str) -> list[RecordedRequest]:
        """The requests one conversation made: those with a user message containing `text`."""
        return [request for request in self.requests if any(text in t for t in user_texts(request.body))]

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._embedding_script.clear()
            self._requests.clear()
            self._anthropic_cache.clear()
            self._openai_cache.clear()
        self.default = echo_reply

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url  # the Anthropic SDK adds /v1 itself

    def listening_message(self) -> str:
        return f"fake LLM listening on {self.base_url} (OpenAI: {self.openai_base_url})"

    # -- request handling -----------------------------------------------------------------------

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def _openai(self, request: Request) -> Response:
        return await self._handle(request, "openai")

    async def _anthropic(self, request: Request) -> Response:
        return await self._handle(request, "anthropic")

    async def _handle(self, request: Request, fmt: WireFormat) -> Response:
        body: Json = await request.json()
        recorded = RecordedRequest(fmt, request.url.path, dict(request.headers), body, self.clock())
        reply = self._take_reply(recorded)
        await asyncio.sleep(self.latency_s + reply.delay_s)
        if reply.hold is not None:
            await asyncio.to_thread(reply.hold.wait, HOLD_LIMIT_S)
        if reply.status != 200:
            payload = reply.error_body if reply.error_body is not None else error_body(fmt, reply.status)
            return JSONResponse(payload, status_code=reply.status, headers=reply.headers)
        try:
            bound = self._bind_reply(reply, fmt, body, recorded.received_at)
        except CacheRuleError as exc:  # refused as the API would; the scripted reply stays unused
            with self._lock:
                self._script.appendleft(reply)
            payload = error_body(fmt, 400)
            payload["error"]["message"] = str(exc)
            return JSONResponse(payload, status_code=400)
        if not body.get("stream"):
            payload = openai_json(bound) if fmt == "openai" else anthropic_json(bound)
            return JSONResponse(payload, headers=reply.headers)
        events = self._openai_sse(bound, body) if fmt == "openai" else self._anthropic_sse(bound)
        return StreamingResponse(events, media_type="text/event-stream", headers=reply.headers)

    async def _embeddings(self, request: Request) -> Response:
        body: Json = await request.json()
        with self._lock:
            self._requests.append(RecordedRequest("openai", request.url.path, dict(request.headers), body))
            reply = self._embedding_script.popleft() if self._embedding_script else FakeReply()
        await asyncio.sleep(self.latency_s + reply.delay_s)
        if reply.status != 200:
            payload = reply.error_body if reply.error_body is not None else error_body("openai", reply.status)
            return JSONResponse(payload, status_code=reply.status, headers=reply.headers)
        texts = embedding_inputs(body)
        if isinstance(texts, str):
            payload = error_body("openai", 400)
            payload["error"]["message"] = texts
            return JSONResponse(payload, status_code=400)
        return JSONResponse(openai_embeddings_json(body, texts), headers=reply.headers)

    def _take_reply(self, recorded: RecordedRequest) -> FakeReply:
        with self._lock:
            self._requests.append(recorded)
            scripted = next((reply for reply in self._script if reply.matches(recorded.body)), None)
            if scripted is not None:
                self._script.remove(scripted)
        return scripted if scripted is not None else self.default(recorded.body)

    def _bind_reply(self, reply: FakeReply, fmt: WireFormat, body: Json, now: float) -> BoundReply:
        # Only successful requests reach here, so failed attempts never populate the cache.
        with self._lock:
            cache = self._openai_cache if fmt == "openai" else self._anthropic_cache
            prompt = cache.usage(body, now)
            serial = next(self._serials)
        return BoundReply(reply=reply, model=str(body.get("model", "fake-model")), serial=serial, prompt=prompt)

    async def _openai_sse(self, bound: BoundReply, body: Json) -> AsyncIterator[str]:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        async for item in _paced(openai_chunks(bound, include_usage), bound.reply):
            yield f"data: {json.dumps(item)}\n\n"
        yield "data: [DONE]\n\n"

    async def _anthropic_sse(self, bound: BoundReply) -> AsyncIterator[str]:
        async for event, data in _paced(anthropic_events(bound), bound.reply):
            yield f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def _paced(items: Iterator[Any], reply: FakeReply) -> AsyncIterator[Any]:
    """Yield the non-None items with the reply's pacing; break the stream where it is scripted to."""
    deltas = 0
    for item in items:
        if item is None:
            deltas += 1
            if reply.fail_after_deltas is not None and deltas >= reply.fail_after_deltas:
                raise _BrokenStream(f"scripted failure after {deltas} deltas")
            continue
        if reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
        yield item


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI/Anthropic-compatible LLM server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before every reply")
    parser.add_argument("--openai-cache-min-tokens", type=int, default=1024)
    # As a process of its own nothing reads the recorded requests: keep only a few, so a long run stays flat.
    parser.add_argument("--keep-requests", type=int, default=100, help="latest requests kept in memory")
    args = parser.parse_args(argv)
    FakeLLM(
        host=args.host,
        port=args.port,
        latency_s=args.latency_ms / 1000.0,
        openai_cache_min_tokens=args.openai_cache_min_tokens,
        keep_requests=args.keep_requests,
    ).serve_forever()


if __name__ == "__main__":
    main()
