"""A request id on every log line of a request, and on the response.

The id is the caller's `X-Request-ID` when it is a short token (so a proxy's id follows the request
through), else a fresh one. It is bound to the structlog context for the request (sync routes run in
a thread pool with a copy of that context, so their lines carry it too), travels with the Celery
tasks the request sends (workers/tracing.py), and comes back in the `X-Request-ID` response header.
"""

from __future__ import annotations

import re
import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
_ACCEPTED = re.compile(rb"^[A-Za-z0-9._:-]{1,64}$")


def request_id_of(scope: Scope) -> str:
    for name, value in scope.get("headers") or []:
        if name == HEADER and _ACCEPTED.match(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


class RequestContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, request_id.encode("ascii"))]}
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            await self.app(scope, receive, send_with_id)
