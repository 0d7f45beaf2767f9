"""The OpenAI-compatible endpoint with the official `openai` SDK as the caller: gateway → turn on the
queue → real Celery worker → fake LLM (through the Anthropic SDK) → the answer built from the turn."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from ops.fake_llm import FakeLLM, FakeReply, RecordedRequest, engram_tail
from shared.infra import db
from tests.conftest import CeleryStack, Gateway

pytestmark = pytest.mark.integration

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def client(gateway: Gateway, api_key: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=api_key, max_retries=0, timeout=60) as sdk:
        yield sdk


def stored(session_key: str, user: str = "alice") -> list[tuple[str, str]]:
    with db.connection() as conn:
        rows = conn.execute(
            """SELECT m.role, m.content FROM session_messages m JOIN sessions s ON s.id = m.session_id
               JOIN users u ON u.id = s.user_id WHERE s.session_key = %s AND u.external_id = %s
               ORDER BY m.turn_id, m.id""",
            (session_key, user),
        ).fetchall()
    return [(row["role"], row["content"]) for row in rows]


def texts_sent(request: RecordedRequest) -> list[str]:
    """Every text of the messages the model got (user text, tool results, assistant text), in order."""
    out = []
    for message in request.body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content:
            if block.get("type") == "text":
                out.append(block["text"])
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                out.append(inner if isinstance(inner, str) else "".join(b.get("text", "") for b in inner or []))
    return out


def test_plain_reply_with_usage_and_the_turn_in_the_session(
    client: openai.OpenAI, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    fake_llm.script(FakeReply(text="Hello Alice, nice to meet you."), match="hi, I am Alice")
    raw = client.chat.completions.with_raw_response.create(
        model="engram", messages=[{"role": "user", "content": "hi, I am Alice", "name": "Alice"}], user="alice"
    )
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.model == "engram"
    assert completion.choices[0].message.content == "Hello Alice, nice to meet you."
    assert completion.choices[0].finish_reason == "stop"
    assert (
        completion.usage is not None and completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    )
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    # Default session: one per user and model; the request was an ordinary turn of it.
    assert raw.headers["X-Engram-Session"] == "openai-engram"
    assert stored("openai-engram") == [("user", "hi, I am Alice"), ("assistant", "Hello Alice, nice to meet you.")]
    with db.connection() as conn:
        # Who said what: the participant's `name`, and the agent's own name for its reply.
        names = conn.execute("SELECT role, name FROM session_messages ORDER BY id").fetchall()
        assert [(m["role"], m["name"]) for m in names] == [("user", "Alice"), ("assistant", "Engram")]
        turn = conn.execute("SELECT status, reply FROM turns WHERE id = %s", (int(raw.headers["X-Engram-Turn-Id"]),))
        assert turn.fetchone() == {"status": "done", "reply": "Hello Alice, nice to meet you."}


def test_streamed_reply_ends_with_usage_and_done(
    client: openai.OpenAI, gateway: Gateway, api_key: str, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    reply = "Streaming works one word at a time."
    fake_llm.script(FakeReply(text=reply), match="stream please")
    stream = client.chat.completions.create(
        model="engram",
        messages=[{"role": "user", "content": "stream please"}],
        user="alice",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # really streamed
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    # On the wire: server-sent events ending with [DONE].
    fake_llm.script(FakeReply(text="Raw stream."), match="raw stream")
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as http:
        body = {
            "model": "engram",
            "user": "alice",
            "stream": True,
            "messages": [{"role": "user", "content": "raw stream"}],
        }
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    streamed = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in lines[:-1])
    assert streamed == "Raw stream."


def test_tool_call_round_trip(client: openai.OpenAI, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    question = {"role": "user", "content": "what is the weather in Paris?"}
    fake_llm.script(FakeReply(text="Let me check.", tool_calls=[("get_weather", {"city": "Paris"})]), match="Paris?")
    first = client.chat.completions.create(model="engram", messages=[question], user="alice", tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The model saw engram's memory tools and the client's tool side by side.
    offered = {tool["name"] for tool in fake_llm.requests_matching("Paris?")[0].body["tools"]}
    assert {"get_weather", "memory_search", "memory_store"} <= offered

    fake_llm.script(FakeReply(text="It is sunny and 21 C in Paris."), match="Paris?")
    second = client.chat.completions.create(
        model="engram",
        user="alice",
        tools=[WEATHER_TOOL],
        messages=[
            question,
            {
                "role": "assistant",
                "content": choice.message.content,
                "tool_calls": [{"id": call.id, "type": "function", "function": call.function.model_dump()}],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ],
    )
    assert second.choices[0].message.content == "It is sunny and 21 C in Paris."
    assert second.choices[0].finish_reason == "stop"
    # The model got the client's result for its call; the question is in the session once.
    last_request = fake_llm.requests_matching("Paris?")[-1]
    assert "sunny, 21 C" in texts_sent(last_request)
    assert stored("openai-engram") == [
        ("user", "what is the weather in Paris?"),
        ("assistant", "Let me check."),
        ("tool", "sunny, 21 C"),
        ("assistant", "It is sunny and 21 C in Paris."),
    ]


def test_resent_history_is_not_duplicated(client: openai.OpenAI, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    history: list[Any] = [{"role": "system", "content": "You are terse."}]
    for text in ("first: I like tea", "second: and biscuits", "third: what do I like?"):
        history.append({"role": "user", "content": text})
        answer = client.chat.completions.create(model="gpt-4o", messages=history, user="alice")
        history.append({"role": "assistant", "content": answer.choices[0].message.content})
    assert [m for m in stored("openai-gpt-4o")] == [
        ("user", "first: I like tea"),
        ("assistant", "echo: first: I like tea"),
        ("user", "second: and biscuits"),
        ("assistant", "echo: second: and biscuits"),
        ("user", "third: what do I like?"),
        ("assistant", "echo: third: what do I like?"),
    ]
    # The model saw each message once, and the client's system message as instructions.
    last = fake_llm.requests_matching("third: what")[-1]
    sent = texts_sent(last)
    assert [t for t in sent if t.startswith(("first:", "second:", "third:"))] == [
        "first: I like tea",
        "second: and biscuits",
        "third: what do I like?",
    ]
    tail = engram_tail(last.body)  # they may change from request to request: after the history
    assert "Instructions from the calling application" in tail and "You are terse." in tail

    # A client that sends only its newest message gets the same session (engram keeps the history).
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "fourth: thanks"}], user="alice"
    )
    assert stored("openai-gpt-4o")[-2:] == [("user", "fourth: thanks"), ("assistant", "echo: fourth: thanks")]
    assert len(stored("openai-gpt-4o")) == 8


def test_two_concurrent_requests_of_one_session_run_in_order(
    client: openai.OpenAI, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    fake_llm.script(FakeReply(text="slow answer", delay_s=1.5), match="request one")
    results: dict[str, str] = {}

    def send(text: str) -> None:
        answer = client.chat.completions.create(
            model="engram",
            messages=[{"role": "user", "content": text}],
            user="alice",
            extra_headers={"X-Engram-Session": "shared"},
        )
        results[text] = answer.choices[0].message.content or ""

    first = threading.Thread(target=send, args=("request one",))
    first.start()
    deadline = time.monotonic() + 30
    while not fake_llm.requests_matching("request one"):  # the first turn is running (its model call is out)
        assert time.monotonic() < deadline, "the first turn never reached the model"
        time.sleep(0.02)
    second = threading.Thread(target=send, args=("request two",))
    second.start()
    first.join(60)
    second.join(60)
    assert results == {"request one": "slow answer", "request two": "echo: request two"}
    # The second turn ran after the first had finished: its model call carried the first exchange.
    second_request = fake_llm.requests_matching("request two")[0]
    assert texts_sent(second_request)[:3] == ["request one", "slow answer", "request two"]
    assert stored("shared") == [
        ("user", "request one"),
        ("assistant", "slow answer"),
        ("user", "request two"),
        ("assistant", "echo: request two"),
    ]


def test_errors_have_openai_shape_and_status(
    client: openai.OpenAI, gateway: Gateway, api_key: str, clean_state: Any
) -> None:
    hello = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.BadRequestError) as missing_user:
        client.chat.completions.create(model="engram", messages=hello)  # type: ignore[arg-type]
    assert missing_user.value.status_code == 400
    assert missing_user.value.body is not None and "user is required" in missing_user.value.body["message"]  # type: ignore[index]
    assert missing_user.value.type == "invalid_request_error"

    with pytest.raises(openai.BadRequestError) as taken:
        tool = {"type": "function", "function": {"name": "memory_store", "parameters": {"type": "object"}}}
        client.chat.completions.create(model="engram", messages=hello, user="alice", tools=[tool])  # type: ignore[list-item]
    assert "memory_store" in str(taken.value)

    with pytest.raises(openai.BadRequestError) as orphan:
        client.chat.completions.create(
            model="engram", user="alice", messages=[{"role": "tool", "tool_call_id": "nope", "content": "x"}]
        )
    assert orphan.value.body["param"] == "messages[0].tool_call_id"  # type: ignore[index]

    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="engram", messages=[], user="alice")

    for nothing in ("", "  ", "\u200b\U000e0041"):  # empty, blank, or only invisible characters: as on REST
        with pytest.raises(openai.BadRequestError) as empty:
            client.chat.completions.create(
                model="engram", messages=[{"role": "user", "content": nothing}], user="alice"
            )
        assert empty.value.body["param"] == "messages[0].content"  # type: ignore[index]

    bad = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="egm_not-a-key", max_retries=0)
    with bad, pytest.raises(openai.AuthenticationError) as unauthorized:
        bad.chat.completions.create(model="engram", messages=hello, user="alice")  # type: ignore[arg-type]
    assert unauthorized.value.status_code == 401 and unauthorized.value.type == "authentication_error"

    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}) as admin:
        reader = admin.post("/v1/admin/keys", json={"scopes": ["memory:read"]}).json()["key"]
        bound = admin.post("/v1/admin/keys", json={"scopes": ["chat"], "user_id": "bob"}).json()["key"]
    read_only = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=reader, max_retries=0)
    with read_only, pytest.raises(openai.PermissionDeniedError) as forbidden:
        read_only.chat.completions.create(model="engram", messages=hello, user="alice")  # type: ignore[arg-type]
    assert forbidden.value.body["code"] == "missing_scope"  # type: ignore[index]
    bobs = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=bound, max_retries=0)
    with bobs, pytest.raises(openai.PermissionDeniedError) as wrong_user:
        bobs.chat.completions.create(model="engram", messages=hello, user="alice")  # type: ignore[arg-type]
    assert wrong_user.value.body["code"] == "wrong_user"  # type: ignore[index]
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM turns").fetchone() == {"n": 0}


def test_models_list_and_an_idempotent_retry(client: openai.OpenAI, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    assert "engram" in [model.id for model in client.models.list()]
    messages: Any = [{"role": "user", "content": "say it once"}]
    headers = {"Idempotency-Key": "retry-1"}
    one = client.chat.completions.with_raw_response.create(
        model="engram", messages=messages, user="alice", extra_headers=headers
    )
    two = client.chat.completions.with_raw_response.create(
        model="engram", messages=messages, user="alice", extra_headers=headers
    )
    assert one.headers["X-Engram-Turn-Id"] == two.headers["X-Engram-Turn-Id"]
    assert one.parse().choices[0].message.content == two.parse().choices[0].message.content == "echo: say it once"
    assert stored("openai-engram") == [("user", "say it once"), ("assistant", "echo: say it once")]


def test_a_bound_key_needs_no_user(gateway: Gateway, api_key: str, workers: CeleryStack, fake_llm: FakeLLM) -> None:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}) as admin:
        key = admin.post("/v1/admin/keys", json={"scopes": ["chat"], "user_id": "carol"}).json()["key"]
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0) as carol:
        answer = carol.chat.completions.create(model="engram", messages=[{"role": "user", "content": "hi from carol"}])
    assert answer.choices[0].message.content == "echo: hi from carol"
    assert stored("openai-engram", user="carol") == [("user", "hi from carol"), ("assistant", "echo: hi from carol")]
