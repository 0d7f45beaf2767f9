"""Providers against the fake LLM server, through the real Anthropic and OpenAI SDKs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx2
import pytest

from ops.fake_cache import estimate_tokens
from ops.fake_llm import FakeLLM, FakeReply
from shared.adapters.llm.anthropic_layout import build_messages as anthropic_messages
from shared.adapters.llm.anthropic_provider import AnthropicProvider
from shared.adapters.llm.openai_provider import OpenAIProvider, parse_arguments
from shared.adapters.llm.retry import RetryPolicy, is_retryable, retry_after_seconds, to_llm_error
from shared.llm.types import ChatMessage, ChatProvider, ChatRequest, LLMError, ToolCall, ToolSpec

Factory = Callable[..., ChatProvider]

LOOKUP = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
EPHEMERAL = {"type": "ephemeral"}
CLOCK = ToolSpec(name="clock", description="Current time.", parameters={"type": "object", "properties": {}})


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLM) -> FakeLLM:
    server.reset()
    return server


@pytest.fixture
def waits() -> list[float]:
    """Waits the retry policy asked for; recorded instead of slept so tests are fast and exact."""
    return []


def _anthropic(fake: FakeLLM, waits: list[float], **kwargs: Any) -> AnthropicProvider:
    policy = RetryPolicy(attempts=4, max_wait=kwargs.pop("max_wait", 5.0), base_wait=0.05, sleep=waits.append)
    return AnthropicProvider(api_key="test-key", base_url=fake.anthropic_base_url, retry=policy, **kwargs)


def _openai(fake: FakeLLM, waits: list[float], **kwargs: Any) -> OpenAIProvider:
    policy = RetryPolicy(attempts=4, max_wait=kwargs.pop("max_wait", 5.0), base_wait=0.05, sleep=waits.append)
    return OpenAIProvider(api_key="test-key", base_url=fake.openai_base_url, retry=policy, **kwargs)


both = pytest.mark.parametrize("make", [_anthropic, _openai], ids=["anthropic", "openai"])


def _request(*messages: ChatMessage, **kwargs: Any) -> ChatRequest:
    return ChatRequest(model="fake-model", messages=messages or (ChatMessage("user", "hello"),), **kwargs)


# --- streaming ---------------------------------------------------------------------------------------


@both
def test_streams_text_deltas_in_order_and_reports_usage(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    provider = make(fake, waits)
    fake.script(FakeReply(text="The quick brown fox"))
    deltas: list[str] = []

    result = provider.chat(_request(), deltas.append)

    assert deltas == ["The ", "quick ", "brown ", "fox"]
    assert result.text == "The quick brown fox"
    assert result.tool_calls == []
    assert result.provider == provider.name
    assert result.model == "fake-model"
    assert result.stop_reason == ("end_turn" if provider.name == "anthropic" else "stop")
    assert result.usage.output_tokens == estimate_tokens("The quick brown fox")
    # A first request reads nothing from cache; Anthropic writes its history up to the last breakpoint.
    assert result.usage.input_tokens + result.usage.cache_write_tokens > 0
    assert result.usage.cache_read_tokens == 0


@both
def test_chat_without_callback_still_returns_text(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    result = make(fake, waits).chat(_request(ChatMessage("user", "ping")))
    assert result.text == "echo: ping"


@both
def test_temperature_is_sent_only_when_set(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    provider = make(fake, waits)
    provider.chat(_request(temperature=0.3))
    provider.chat(_request())
    first, second = (request.body for request in fake.requests)
    assert first["temperature"] == 0.3
    assert "temperature" not in second
    assert first["max_tokens"] == 1024


# --- tool calls --------------------------------------------------------------------------------------


def _tool_round_trip(provider: ChatProvider, fake: FakeLLM) -> tuple[list[ToolCall], str]:
    """Model calls two tools, the results go back; returns the calls and the final text."""
    fake.script(FakeReply(text="Let me check.", tool_calls=[("lookup", {"q": "cat", "n": 2}), ("clock", {})]))
    question = ChatMessage("user", "what is a cat?")
    first = provider.chat(_request(question, tools=(LOOKUP, CLOCK)))
    follow_up = _request(
        question,
        ChatMessage("assistant", first.text, tool_calls=tuple(first.tool_calls)),
        ChatMessage("tool", "a small feline", tool_call_id=first.tool_calls[0].id, tool_name="lookup"),
        ChatMessage("tool", "clock broke", tool_call_id=first.tool_calls[1].id, tool_name="clock", is_error=True),
        tools=(LOOKUP, CLOCK),
    )
    second = provider.chat(follow_up)
    return first.tool_calls, second.text


def test_anthropic_tool_call_round_trip(fake: FakeLLM, waits: list[float]) -> None:
    calls, final_text = _tool_round_trip(_anthropic(fake, waits), fake)

    assert [(call.name, call.arguments) for call in calls] == [("lookup", {"q": "cat", "n": 2}), ("clock", {})]
    first, second = (request.body for request in fake.requests)
    assert [tool["name"] for tool in first["tools"]] == ["clock", "lookup"]  # sorted, not given order
    assert first["tools"][1] == {
        "name": "lookup",
        "description": LOOKUP.description,
        "input_schema": LOOKUP.parameters,
    }
    assert second["messages"] == [
        # The previous request's last block and this one's carry the rolling cache breakpoints.
        {"role": "user", "content": [{"type": "text", "text": "what is a cat?", "cache_control": EPHEMERAL}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": calls[0].id, "name": "lookup", "input": {"q": "cat", "n": 2}},
                {"type": "tool_use", "id": calls[1].id, "name": "clock", "input": {}},
            ],
        },
        {  # both results in ONE user turn, because Anthropic requires alternating roles
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": calls[0].id, "content": "a small feline", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": calls[1].id,
                    "content": "clock broke",
                    "is_error": True,
                    "cache_control": EPHEMERAL,
                },
            ],
        },
    ]
    assert final_text == "echo: a small felineclock broke"


def test_openai_tool_call_round_trip(fake: FakeLLM, waits: list[float]) -> None:
    calls, final_text = _tool_round_trip(_openai(fake, waits), fake)

    assert [(call.name, call.arguments) for call in calls] == [("lookup", {"q": "cat", "n": 2}), ("clock", {})]
    first, second = (request.body for request in fake.requests)
    assert [tool["function"]["name"] for tool in first["tools"]] == ["clock", "lookup"]
    assert first["tools"][1] == {
        "type": "function",
        "function": {"name": "lookup", "description": LOOKUP.description, "parameters": LOOKUP.parameters},
    }
    assert first["stream_options"] == {"include_usage": True}
    assistant, lookup_result, clock_result = second["messages"][1:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me check."
    assert [(c["id"], c["type"], c["function"]["name"]) for c in assistant["tool_calls"]] == [
        (calls[0].id, "function", "lookup"),
        (calls[1].id, "function", "clock"),
    ]
    assert parse_arguments(assistant["tool_calls"][0]["function"]["arguments"]) == {"q": "cat", "n": 2}
    assert lookup_result == {"role": "tool", "tool_call_id": calls[0].id, "content": "a small feline"}
    assert clock_result == {"role": "tool", "tool_call_id": calls[1].id, "content": "clock broke"}
    assert final_text == "echo: clock broke"


def test_openai_assistant_without_text_sends_null_content(fake: FakeLLM, waits: list[float]) -> None:
    call = ToolCall(id="call_1", name="clock", arguments={})
    _openai(fake, waits).chat(
        _request(
            ChatMessage("user", "time?"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", "noon", tool_call_id="call_1"),
        )
    )
    assert fake.requests[0].body["messages"][1]["content"] is None


def test_openai_parse_arguments_keeps_malformed_json() -> None:
    assert parse_arguments('{"q": "cat"}') == {"q": "cat"}
    assert parse_arguments("") == {}
    assert parse_arguments('{"q": "ca') == {"_raw": '{"q": "ca'}
    assert parse_arguments("[1, 2]") == {"_raw": "[1, 2]"}


def test_anthropic_merges_consecutive_turns_and_drops_empty_assistant() -> None:
    messages = anthropic_messages(
        (
            ChatMessage("user", "one"),
            ChatMessage("assistant", ""),
            ChatMessage("user", "two"),
            ChatMessage("assistant", "ok"),
        )
    )
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]


# --- system prompt and caching -----------------------------------------------------------------------


def test_anthropic_static_system_block_breakpoint_and_tail_after_the_history(fake: FakeLLM, waits: list[float]) -> None:
    provider = _anthropic(fake, waits)
    provider.chat(_request(system_static="You are helpful.", dynamic_tail="Today is Monday."))
    provider.chat(_request(dynamic_tail="Only dynamic."))
    provider.chat(_request())

    full, dynamic_only, none = (request.body for request in fake.requests)
    assert full["system"] == [{"type": "text", "text": "You are helpful.", "cache_control": EPHEMERAL}]
    # The tail is the last block of the last user turn, after the history's breakpoint.
    assert full["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hello", "cache_control": EPHEMERAL},
                {"type": "text", "text": "Today is Monday."},
            ],
        }
    ]
    assert "system" not in dynamic_only and dynamic_only["messages"][-1]["content"][-1] == {
        "type": "text",
        "text": "Only dynamic.",
    }
    assert "system" not in none


def test_openai_static_system_message_and_tail_on_the_last_message(fake: FakeLLM, waits: list[float]) -> None:
    _openai(fake, waits).chat(_request(system_static="You are helpful.", dynamic_tail="Today is Monday."))
    assert fake.requests[0].body["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "hello\n\nToday is Monday."},
    ]


def test_anthropic_cache_write_then_read_across_dynamic_changes(fake: FakeLLM, waits: list[float]) -> None:
    provider = _anthropic(fake, waits)
    static = "Stable instructions. " * 40

    first = provider.chat(_request(ChatMessage("user", "a"), system_static=static, dynamic_tail="turn 1"))
    # Only the tail changes, so everything up to the history's breakpoint must be read.
    second = provider.chat(_request(ChatMessage("user", "a"), system_static=static, dynamic_tail="turn 2"))

    assert first.usage.cache_write_tokens > 0
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens  # the uncached tail is the same size


def test_openai_cached_tokens_are_split_out_of_input(fake: FakeLLM, waits: list[float]) -> None:
    provider = _openai(fake, waits)
    static = "Stable instructions. " * 300  # above OpenAI's 1024-token caching threshold

    first = provider.chat(_request(ChatMessage("user", "a"), system_static=static, dynamic_tail="turn 1"))
    second = provider.chat(_request(ChatMessage("user", "b"), system_static=static, dynamic_tail="turn 2"))

    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens >= 1024
    assert second.usage.cache_write_tokens == 0
    # Same prompt size both times; the cached part moved out of input_tokens rather than adding to it.
    assert second.usage.input_tokens + second.usage.cache_read_tokens == first.usage.input_tokens


# --- retries -----------------------------------------------------------------------------------------


@both
def test_retries_429_honouring_retry_after(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=429, headers={"retry-after": "0.2"}), FakeReply(text="ok"))
    result = make(fake, waits).chat(_request())
    assert result.text == "ok"
    assert len(fake.requests) == 2
    assert waits == [0.2]


@both
def test_retry_after_ms_takes_precedence(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=429, headers={"retry-after-ms": "150", "retry-after": "9"}), FakeReply(text="ok"))
    assert make(fake, waits).chat(_request()).text == "ok"
    assert waits == [0.15]


@both
def test_retry_after_is_capped_by_max_wait(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=429, headers={"retry-after": "120"}), FakeReply(text="ok"))
    assert make(fake, waits, max_wait=0.5).chat(_request()).text == "ok"
    assert waits == [0.5]


@both
def test_retries_503_with_backoff(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=503), FakeReply(status=503), FakeReply(text="ok"))
    assert make(fake, waits).chat(_request()).text == "ok"
    assert len(fake.requests) == 3
    assert len(waits) == 2
    assert all(0.05 <= wait <= 0.05 * 2 + 0.05 for wait in waits)  # base 0.05 doubling, plus jitter


@both
def test_gives_up_after_max_attempts(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(*(FakeReply(status=503) for _ in range(5)))
    with pytest.raises(LLMError) as caught:
        make(fake, waits).chat(_request())
    assert len(fake.requests) == 4
    assert caught.value.status == 503
    assert caught.value.retryable is True
    assert "gave up after 4 attempts" in str(caught.value)


@both
@pytest.mark.parametrize("status", [400, 401])
def test_does_not_retry_client_errors(make: Factory, status: int, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=status, headers={"retry-after": "0"}), FakeReply(text="never sent"))
    provider = make(fake, waits)
    with pytest.raises(LLMError) as caught:
        provider.chat(_request())
    assert len(fake.requests) == 1
    assert waits == []
    assert caught.value.status == status
    assert caught.value.retryable is False
    assert str(caught.value).startswith(f"{provider.name} returned {status} ")


def test_anthropic_error_message_is_readable(fake: FakeLLM, waits: list[float]) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    fake.script(FakeReply(status=401, error_body=body))
    with pytest.raises(LLMError, match=r"^anthropic returned 401 authentication_error: invalid x-api-key$"):
        _anthropic(fake, waits).chat(_request())


def test_openai_error_message_is_readable(fake: FakeLLM, waits: list[float]) -> None:
    body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "x"}}
    fake.script(FakeReply(status=401, error_body=body))
    with pytest.raises(LLMError, match=r"^openai returned 401 invalid_request_error: Incorrect API key provided$"):
        _openai(fake, waits).chat(_request())


@both
def test_retries_timeouts(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(text="too late", delay_s=2.0), FakeReply(text="ok"))
    assert make(fake, waits, timeout=0.3).chat(_request()).text == "ok"
    assert len(fake.requests) == 2


@both
def test_broken_stream_is_not_replayed_after_output(make: Factory, fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(text="one two three four", fail_after_deltas=2), FakeReply(text="replayed"))
    deltas: list[str] = []
    with pytest.raises(LLMError) as caught:
        make(fake, waits).chat(_request(), deltas.append)
    assert deltas == ["one ", "two "]
    assert len(fake.requests) == 1
    assert "cut off" in str(caught.value)


def test_real_sleep_retry_after(fake: FakeLLM) -> None:
    """The default sleep is used when none is injected (no wall-clock assertion, only call count)."""
    fake.script(FakeReply(status=429, headers={"retry-after": "0.2"}), FakeReply(text="ok"))
    provider = OpenAIProvider(api_key="k", base_url=fake.openai_base_url, retry=RetryPolicy(attempts=2))
    assert provider.chat(_request()).text == "ok"
    assert len(fake.requests) == 2


def test_retry_after_parsing() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 01 Jan 2025 12:00:07 GMT"}, now=now) == 7.0
    assert retry_after_seconds({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_anthropic_in_stream_error_event_is_classified_like_its_http_status() -> None:
    # Anthropic reports mid-stream overloads as an SSE error event inside a 200 response.
    response = httpx2.Response(200, request=httpx2.Request("POST", "http://fake/v1/messages"))
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    overloaded = anthropic.APIStatusError(str(body), response=response, body=body)
    invalid = anthropic.APIStatusError("bad", response=response, body={"error": {"type": "invalid_request_error"}})

    assert is_retryable(overloaded) is True
    error = to_llm_error(overloaded, provider="anthropic")
    assert (str(error), error.status) == ("anthropic stream error overloaded_error: Overloaded", 529)
    assert is_retryable(invalid) is False
