"""A time limit on every request: a stalled dependency becomes a `503 dependency_timeout`, not a hang.

Postgres, Redis or the broker that stop answering without closing the connection (a frozen process, a
full disk, a network that drops packets) leave a query or a command waiting; the clients' own limits
(ENGRAM_DB_*, ENGRAM_REDIS_*) bound most of those waits, but not a query already sent to a Postgres that
stopped. So the gateway bounds the whole request: if no response has started within its limit, the
client gets `503` with the reason and `Retry-After`, and the route's work is abandoned (a thread blocked
on the stalled server finishes, or fails, when the server answers again; its result is discarded).

The limit ends when the response starts: a stream (`/events`, chat completions with `stream=true`) has
answered by then, and runs on under its own limit (ENGRAM_SSE_MAX_SECONDS). Requests that wait on
purpose get their wait on top: a long poll's `?wait=` (capped at ENGRAM_MAX_WAIT_SECONDS) and a
non-streaming chat completion (ENGRAM_CHAT_COMPLETIONS_WAIT_SECONDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from shared.infra.logging import get_logger

log = get_logger(__name__)

# Sent with the 503: by then the stalled dependency has had the whole limit; a client retries a little later.
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class RequestLimits:
    seconds: float  # ENGRAM_REQUEST_TIME_LIMIT_SECONDS; 0 = no limit
    max_wait_seconds: float  # ENGRAM_MAX_WAIT_SECONDS: the cap on a long poll's ?wait=
    chat_completions_wait_seconds: float  # ENGRAM_CHAT_COMPLETIONS_WAIT_SECONDS

    def for_request(self, method: str, path: str, query_string: bytes) -> float | None:
        """This request's limit in seconds; None when it has none."""
        if self.seconds <= 0:
            return None
        limit = self.seconds
        if method == "POST" and path.rstrip("/") == "/v1/chat/completions":
            limit += self.chat_completions_wait_seconds
        wait = parse_qs(query_string.decode("latin-1")).get("wait")
        if wait:
            limit += _wait_seconds(wait[-1], self.max_wait_seconds)
        return limit


def _wait_seconds(text: str, cap: float) -> float:
    """A `?wait=` as the route reads it, capped; an invalid one is refused by the route (422) anyway."""
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return min(value, cap) if math.isfinite(value) and value > 0 else 0.0


class RequestTimeLimit:
    def __init__(self, app: ASGIApp, limits: RequestLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = (
            self.limits.for_request(scope["method"], scope["path"], scope.get("query_string", b""))
            if scope["type"] == "http"
            else None
        )
        if limit is None:
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()
        timed_out = False

        async def guarded_send(message: Message) -> None:
            if timed_out:
                return  # the client has its 503; what the abandoned route sends later goes nowhere
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, guarded_send))
        waiter = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done() or started.is_set():
            await task  # answered (or answering) in time: its own result, or its own error
            return
        timed_out = True
        # A sync route's thread cannot be interrupted, and cancelling waits for it: abandon the task instead.
        task.cancel()
        task.add_done_callback(_discard_result)
        log.warning("request over its time limit", method=scope["method"], path=scope["path"], limit_s=limit)
        response = error_response(
            503,
            f"the request was not answered within its limit of {limit:g} s (ENGRAM_REQUEST_TIME_LIMIT_SECONDS): "
            "a dependency (Postgres, Redis) is not answering; retry later (a POST with the same Idempotency-Key)",
            "dependency_timeout",
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
        await response(scope, receive, send)


def _discard_result(task: asyncio.Future[None]) -> None:
    # Retrieved so asyncio does not log "exception was never retrieved" for an abandoned route's error.
    with contextlib.suppress(BaseException):
        task.result()
