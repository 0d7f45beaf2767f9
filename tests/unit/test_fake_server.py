"""ops/fake_server.py: the lifecycle every fake server (fake LLM, fake Slack/Telegram) shares."""

from __future__ import annotations

import threading

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ops.fake_channels import FakeChannels
from ops.fake_llm import FakeLLM
from ops.fake_server import FakeServer


class Echo(FakeServer):
    label = "fake echo"

    def __init__(self) -> None:
        super().__init__(Starlette(routes=[Route("/", self._hello)]))

    async def _hello(self, request: Request) -> Response:
        return PlainTextResponse("hello")


def test_serves_on_a_free_port_in_a_daemon_thread_until_stopped() -> None:
    with Echo() as fake:
        assert fake.port > 0 and fake.base_url == f"http://127.0.0.1:{fake.port}"
        assert httpx.get(fake.base_url).text == "hello"
        thread = next(t for t in threading.enumerate() if t.name == "fake-echo")
        assert thread.daemon
    assert not thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(fake.base_url, timeout=2)


def test_the_fakes_keep_their_addresses_and_start_messages() -> None:
    with FakeLLM() as llm, FakeChannels() as channels:
        assert llm.openai_base_url == f"{llm.base_url}/v1" and llm.anthropic_base_url == llm.base_url
        assert channels.slack_api_url == f"{channels.base_url}/api/" and channels.telegram_api_url == channels.base_url
        assert llm.listening_message() == f"fake LLM listening on {llm.base_url} (OpenAI: {llm.openai_base_url})"
        assert channels.listening_message().startswith("fake Slack at http://127.0.0.1:")
