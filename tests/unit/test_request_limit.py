"""The gateway's request time limit (api/request_limit.py): a route stuck on a dependency is answered with
`503 dependency_timeout` and its reason instead of hanging; a response that started in time (a stream)
runs on; requests that wait on purpose get their wait on top of the limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from api.request_limit import RequestLimits, RequestTimeLimit

LIMIT_S = 0.3
LIMITS = RequestLimits(LIMIT_S, max_wait_seconds=60, chat_completions_wait_seconds=300)


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set at the end: a route thread the limit abandoned finishes, as a stalled server's caller does."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def client(released: threading.Event) -> Iterator[TestClient]:
    app = FastAPI()
    gone_on = asyncio.Event()  # never set: an async dependency that stopped answering

    @app.get("/stuck-async")
    async def stuck_async() -> dict[str, str]:
        await gone_on.wait()
        return {"never": "answered"}

    @app.get("/stuck-thread")
    def stuck_thread() -> dict[str, str]:  # a sync route: a driver blocked in a thread, which cannot be cancelled
        released.wait()
        return {"never": "answered"}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"first "
            await asyncio.sleep(LIMIT_S * 2)  # past the limit, after the response started
            yield b"second"

        return StreamingResponse(body())

    @app.get("/fast")
    def fast() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(RequestTimeLimit, limits=LIMITS)
    with TestClient(app) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/stuck-async", "/stuck-thread"])
def test_a_stuck_request_is_answered_503_with_its_reason(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "dependency_timeout"
    assert "ENGRAM_REQUEST_TIME_LIMIT_SECONDS" in body["detail"] and "Idempotency-Key" in body["detail"]
    assert response.headers["Retry-After"] == "5"


def test_the_gateway_answers_on_while_a_route_is_stuck(client: TestClient) -> None:
    assert client.get("/stuck-thread").status_code == 503
    assert client.get("/fast").json() == {"ok": "yes"}


def test_a_response_that_started_in_time_runs_to_its_end(client: TestClient) -> None:
    response = client.get("/stream")
    assert response.status_code == 200
    assert response.text == "first second"


@pytest.mark.parametrize(
    ("method", "path", "query", "limit"),
    [
        ("GET", "/v1/turns/1", b"", LIMIT_S),
        ("GET", "/v1/turns/1", b"wait=20", LIMIT_S + 20),
        ("GET", "/v1/turns/1", b"wait=600", LIMIT_S + 60),  # the route caps wait at ENGRAM_MAX_WAIT_SECONDS
        ("GET", "/v1/turns/1", b"wait=nan", LIMIT_S),  # refused by the route (422), not a longer limit
        ("GET", "/v1/turns/1", b"wait=-3", LIMIT_S),
        ("POST", "/v1/chat/completions", b"", LIMIT_S + 300),
        ("POST", "/v1/sessions/s/turns", b"", LIMIT_S),
    ],
)
def test_a_request_that_waits_on_purpose_gets_its_wait_on_top(
    method: str, path: str, query: bytes, limit: float
) -> None:
    assert LIMITS.for_request(method, path, query) == pytest.approx(limit)


def test_zero_means_no_limit() -> None:
    assert RequestLimits(0, 60, 300).for_request("GET", "/v1/turns/1", b"") is None
