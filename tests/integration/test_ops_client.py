"""The CLI's client (ops/client.py: the Python client plus chat turns) against the real gateway and workers:
what `engram chat` does (submit, stream the reply), `engram context`'s view, and refusals as the Python
client's `EngramAPIError` with engram's code."""

from __future__ import annotations

import pytest

from ops.client import EngramAPIError, EngramClient
from ops.fake_llm import FakeLLM, FakeReply
from tests.conftest import CeleryStack, Gateway

pytestmark = pytest.mark.integration


def test_a_turn_streams_its_reply_and_the_session_is_readable(
    gateway: Gateway, api_key: str, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    fake_llm.script(FakeReply(text="Hello Alice, nice to meet you."), match="Hi from the CLI client")
    with EngramClient(gateway.url, api_key) as client:
        accepted = client.submit_turn("cli-s1", "alice", "Hi from the CLI client")
        events = list(client.events(accepted["turn_id"], timeout=120))
        deltas = "".join(event.data["text"] for event in events if event.event == "delta")
        assert events[-1].event == "done" and deltas == "Hello Alice, nice to meet you."
        turn = client.get_turn(accepted["turn_id"])
        assert turn["status"] == "done" and turn["reply"] == deltas
        said = [(m["role"], m["content"]) for m in client.messages("cli-s1", "alice")["messages"]]
        assert said == [("user", "Hi from the CLI client"), ("assistant", deltas)]
        view = client.session_context("cli-s1", "alice")
        assert view["session_exists"] and view["session_key"] == "cli-s1"
        # The memory API of the Python client is there too.
        assert client.memories("alice") == []

        with pytest.raises(EngramAPIError) as missing:
            client.get_turn(999_999)
        assert missing.value.status_code == 404 and missing.value.code == "not_found"
        with pytest.raises(EngramAPIError) as streamed:
            next(iter(client.events(999_999)))
        assert streamed.value.status_code == 404
