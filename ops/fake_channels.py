"""Local fake Slack Web API and Telegram Bot API servers, for tests and benchmarks.

The real clients talk to them through ENGRAM_SLACK_API_URL and ENGRAM_TELEGRAM_API_URL. Every call is
recorded (method, token, body, arrival time); a test scripts failures per method (`script("chat.postMessage",
Scripted(status=429, headers={"Retry-After": "1"}))`) and waits for calls with `wait_for` instead of
sleeping. The Telegram fake also serves getUpdates from updates a test pushes.

    python -m ops.fake_channels --port 8998      # both APIs: Slack at /api/, Telegram at /bot<token>/;
                                                 # prints one JSON line per call it receives
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ops.fake_server import FakeServer

Json = dict[str, Any]


@dataclass
class Scripted:
    """One scripted answer to the next call of a method (instead of the default success)."""

    status: int = 200
    body: Json | None = None  # default: an error body in the platform's shape for status != 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: str | None = None  # a non-JSON body (an HTML error page)


@dataclass(frozen=True)
class Call:
    platform: str  # slack | telegram
    method: str
    token: str
    body: Json
    at: float  # time.monotonic() on arrival


class _Recorder:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls: list[Call] = []
        self._script: dict[str, deque[Scripted]] = defaultdict(deque)

    def record(self, call: Call) -> Scripted | None:
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()
            queue = self._script.get(call.method)
            return queue.popleft() if queue else None

    def script(self, method: str, *answers: Scripted) -> None:
        with self._cond:
            self._script[method].extend(answers)

    def calls(self, method: str | None = None) -> list[Call]:
        with self._cond:
            return [c for c in self._calls if method is None or c.method == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 60.0) -> list[Call]:
        """Block until at least `count` calls of `method` arrived; returns them all."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [c for c in self._calls if c.method == method]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{count} {method} call(s) expected, {len(found)} arrived")
                self._cond.wait(remaining)

    def reset(self) -> None:
        with self._cond:
            self._calls.clear()
            self._script.clear()


async def _body(request: Request) -> Json:
    raw = await request.body()
    body: Json = dict(parse_qsl(request.url.query))
    if not raw:
        return body
    content_type = request.headers.get("content-type", "")
    if "json" in content_type:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict):
            body.update(parsed)
    else:
        body.update(parse_qsl(raw.decode("utf-8", "replace")))
    return body


class FakeChannels(FakeServer):
    """Both fakes on one server: Slack at /api/<method>, Telegram at /bot<token>/<method>."""

    label = "fake channels"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.slack = _Recorder()
        self.telegram = _Recorder()
        self.slack_token: str | None = None  # when set, other tokens get invalid_auth
        self.print_calls = False  # the CLI prints one JSON line per call (to check a stack by hand)
        self.telegram_bot = {"id": 7000001, "is_bot": True, "first_name": "Engram", "username": "engram_test_bot"}
        self._ts = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._updates: list[Json] = []
        self._updates_lock = threading.Lock()
        routes = [
            Route("/api/{method}", self._slack, methods=["GET", "POST"]),
            Route("/bot{token}/{method}", self._telegram, methods=["GET", "POST"]),
        ]
        super().__init__(Starlette(routes=routes), host=host, port=port)

    # -- addresses ------------------------------------------------------------------------------

    @property
    def slack_api_url(self) -> str:
        return f"{self.base_url}/api/"

    @property
    def telegram_api_url(self) -> str:
        return self.base_url

    # -- Telegram updates for getUpdates --------------------------------------------------------

    def push_update(self, update: Json) -> None:
        with self._updates_lock:
            self._updates.append(update)

    def reset(self) -> None:
        self.slack.reset()
        self.telegram.reset()
        self.slack_token = None
        with self._updates_lock:
            self._updates.clear()

    # -- handlers -------------------------------------------------------------------------------

    def _print(self, platform: str, method: str, token: str, body: Json) -> None:
        if self.print_calls:
            print(json.dumps({"platform": platform, "method": method, "token": token, "body": body}), flush=True)

    async def _answer(self, scripted: Scripted | None, default: Json, error: Json) -> Response:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if scripted is None:
            return JSONResponse(default)
        if scripted.delay_s:
            await asyncio.sleep(scripted.delay_s)
        if scripted.raw is not None:
            return Response(scripted.raw, status_code=scripted.status, headers=scripted.headers, media_type="text/html")
        body = scripted.body if scripted.body is not None else (default if scripted.status == 200 else error)
        return JSONResponse(body, status_code=scripted.status, headers=scripted.headers)

    async def _slack(self, request: Request) -> Response:
        method = request.path_params["method"]
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip()
        body = await _body(request)
        scripted = self.slack.record(Call("slack", method, token, body, time.monotonic()))
        self._print("slack", method, token, body)
        if self.slack_token is not None and token != self.slack_token:
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        if method == "chat.postMessage":
            ts = f"1700000000.{next(self._ts):06d}"
            default: Json = {
                "ok": True,
                "channel": body.get("channel"),
                "ts": ts,
                "message": {"text": body.get("text")},
            }
        elif method == "users.info":
            user = str(body.get("user") or "")
            default = {
                "ok": True,
                "user": {"id": user, "name": user.lower(), "profile": {"display_name": f"Person {user}"}},
            }
        else:
            default = {"ok": True}
        error = {"ok": False, "error": "ratelimited" if scripted and scripted.status == 429 else "fatal_error"}
        return await self._answer(scripted, default, error)

    async def _telegram(self, request: Request) -> Response:
        method = request.path_params["method"]
        token = request.path_params["token"]
        body = await _body(request)
        scripted = self.telegram.record(Call("telegram", method, token, body, time.monotonic()))
        self._print("telegram", method, token, body)
        bot_id, _, secret = token.partition(":")
        if not bot_id.isdigit() or not secret:  # any well-formed token is a bot here; its number is the bot's id
            return JSONResponse({"ok": False, "error_code": 401, "description": "Unauthorized"}, status_code=401)
        if method == "sendMessage":
            default: Json = {
                "ok": True,
                "result": {
                    "message_id": next(self._message_ids),
                    "chat": {"id": body.get("chat_id")},
                    "text": body.get("text"),
                },
            }
        elif method == "getMe":
            default = {"ok": True, "result": {**self.telegram_bot, "id": int(bot_id)}}
        elif method == "getUpdates":
            default = {"ok": True, "result": await self._take_updates(body)}
        else:
            default = {"ok": True, "result": True}
        status = scripted.status if scripted else 200
        error: Json = {"ok": False, "error_code": status, "description": "Internal Server Error"}
        if status == 429:
            retry_after = int(float((scripted.headers if scripted else {}).get("Retry-After", "1")))
            error = {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {retry_after}",
                "parameters": {"retry_after": retry_after},
            }
        return await self._answer(scripted, default, error)

    async def _take_updates(self, body: Json) -> list[Json]:
        offset = int(body.get("offset") or 0)
        wait = min(float(body.get("timeout") or 0), 2.0)  # a short long poll keeps tests and benchmarks quick
        deadline = time.monotonic() + wait
        while True:
            with self._updates_lock:
                # Telegram forgets updates below the offset once a poll confirms them.
                self._updates = [u for u in self._updates if int(u.get("update_id", 0)) >= offset]
                ready = list(self._updates[:100])
            if ready or time.monotonic() >= deadline:
                return ready
            await asyncio.sleep(0.05)

    def listening_message(self) -> str:
        return f"fake Slack at {self.slack_api_url}, fake Telegram at {self.telegram_api_url}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8998)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    fake = FakeChannels(host=args.host, port=args.port, latency_s=args.latency_ms / 1000)
    fake.print_calls = True
    fake.serve_forever()


if __name__ == "__main__":
    main()
