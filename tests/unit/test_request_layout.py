"""The request layout for the prompt cache, both providers: tools → static system prompt → history
(append-only) → dynamic tail. What a request sends before its tail is byte-identical to what the next
request sends at the same place, across tool iterations and turns; Anthropic's breakpoints sit on the
static prompt and the last two user turns of the history, never more than 4; the tail comes last."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

from ops.fake_cache import AnthropicCache, anthropic_parts, canonical
from shared.adapters.llm import anthropic_layout, openai_layout
from shared.agent import run_agent_loop
from shared.context.tail import OPEN
from shared.llm.types import ChatMessage, ChatRequest, ChatResult, ToolCall
from tests.unit.test_agent_loop import CTX, NOW, RecordingEvents, ScriptedProvider, deps, turn_context

Json = dict[str, Any]


def run_session(user_texts: list[str], tool_calls_per_turn: dict[int, int]) -> list[ChatRequest]:
    """The model requests of a session, turn after turn, with `n` parallel tool calls (current_time)
    in the first iteration of the turns listed; the clock moves a minute per turn."""
    history: list[ChatMessage] = []
    requests: list[ChatRequest] = []
    for number, text in enumerate(user_texts):
        history.append(ChatMessage("user", text))
        calls = [ToolCall(f"t{number}_{i}", "current_time", {}) for i in range(tool_calls_per_turn.get(number, 0))]
        script = [ChatResult(text="checking", tool_calls=calls)] if calls else []
        provider = ScriptedProvider(*script, ChatResult(text=f"answer {number}"))
        turn_deps = deps(provider)
        turn_deps.clock = lambda n=number: NOW + timedelta(minutes=n)  # type: ignore[misc]
        outcome = run_agent_loop(list(history), CTX, turn_deps, RecordingEvents(), turn_context())  # type: ignore[arg-type]
        history.extend(outcome.messages)
        requests.extend(provider.requests)
    return requests


TEXTS = ["hi", "what time is it?", "ok", "plan my week", "thanks", "and the time now?"]
TOOLS = {1: 1, 3: 12, 5: 2}  # turn 3 makes 12 parallel calls: 24+ blocks between two breakpoints


def anthropic_body(request: ChatRequest) -> Json:
    return {
        "model": "claude-sonnet-4-6",
        "tools": anthropic_layout.build_tools(request.tools),
        "system": anthropic_layout.build_system(request),
        "messages": anthropic_layout.layout_messages(request),
    }


def without_tail(body: Json) -> list[str]:
    """The request's blocks before the tail, as bytes, without cache_control (not part of the prefix)."""
    parts, _ = anthropic_parts(body)
    assert parts[-1]["text"].startswith(OPEN)  # the tail is the very last block
    return [canonical({k: v for k, v in p.items() if k != "cache_control"}) for p in parts[:-1]]


def test_anthropic_prefix_is_byte_identical_across_iterations_and_turns() -> None:
    requests = run_session(TEXTS, TOOLS)
    assert len(requests) == len(TEXTS) + len(TOOLS)
    bodies = [anthropic_body(r) for r in requests]
    for before, after in pairwise(bodies):
        old, new = without_tail(before), without_tail(after)
        # Tools and system are the same; the history only grew at the end.
        assert new[: len(old)] == old
        assert len(new) > len(old)


def test_anthropic_breakpoints_static_prompt_and_last_two_user_turns_and_tail_last() -> None:
    for request in run_session(TEXTS, TOOLS):
        body = anthropic_body(request)
        system, messages = body["system"], body["messages"]
        assert [b.get("cache_control") for b in system] == [{"type": "ephemeral"}]
        assert anthropic_layout.breakpoints(system, messages) <= anthropic_layout.MAX_BREAKPOINTS
        marked = [
            (i, j)
            for i, m in enumerate(messages)
            if isinstance(m["content"], list)
            for j, b in enumerate(m["content"])
            if b.get("cache_control")
        ]
        last = len(messages) - 1
        tail = messages[last]["content"][-1]
        assert tail["text"].startswith(OPEN) and "Current date and time" in tail["text"]
        assert "cache_control" not in tail
        # The last block before the tail, and the last block of the previous user turn (if any).
        expected = [(last, len(messages[last]["content"]) - 2)]
        if last >= 2:
            expected.insert(0, (last - 2, len(messages[last - 2]["content"]) - 1))
        assert marked == expected
        assert all(m["role"] != messages[i + 1]["role"] for i, m in enumerate(messages[:-1]))  # alternation


def test_anthropic_previous_prefix_is_read_even_after_many_parallel_tool_calls() -> None:
    """With the fake's rules (20-block lookback included), every request reads all the previous request
    cached: its breakpoint is repeated, so the distance in blocks does not matter."""
    clock = [0.0]
    cache = AnthropicCache(clock=lambda: clock[0])
    previous_end = 0
    for index, request in enumerate(run_session(TEXTS, TOOLS)):
        body = anthropic_body(request)
        usage = cache.usage(body)
        if index:
            assert usage.cache_read_tokens == previous_end
        previous_end = usage.cache_read_tokens + usage.cache_write_tokens
        clock[0] += 30


def test_openai_prefix_is_byte_identical_and_tail_ends_the_last_message() -> None:
    requests = run_session(TEXTS, TOOLS)
    bodies = [openai_layout.build_messages(r) for r in requests]
    for request, messages in zip(requests, bodies, strict=True):
        assert messages[0] == {"role": "system", "content": request.system_static}
        assert [m["role"] for m in messages[1:]] == [m.role for m in request.messages]  # no message of its own
        last = messages[-1]
        assert isinstance(last["content"], str) and last["content"].endswith(request.dynamic_tail)
        assert request.dynamic_tail.startswith(OPEN)
    for (before, old), new in zip(zip(requests, bodies, strict=True), bodies[1:], strict=False):
        # Everything but the last message is repeated as is; the last one without its tail too.
        assert new[: len(old) - 1] == old[:-1]
        head = old[-1]["content"].removesuffix(openai_layout.TAIL_SEPARATOR + before.dynamic_tail)
        assert canonical({**old[-1], "content": head}) == canonical(new[len(old) - 1])


def test_openai_tail_without_a_user_side_message_is_a_message_of_its_own() -> None:
    request = ChatRequest(model="m", messages=(ChatMessage("assistant", "hi"),), dynamic_tail="<turn-context>x")
    assert openai_layout.build_messages(request)[-1] == {"role": "user", "content": "<turn-context>x"}


def test_anthropic_tail_after_an_assistant_turn_is_a_user_turn_of_its_own() -> None:
    request = ChatRequest(
        model="m",
        messages=(ChatMessage("user", "hi"), ChatMessage("assistant", "hello")),
        dynamic_tail="<turn-context>x",
    )
    messages = anthropic_layout.layout_messages(request)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[-1]["content"] == [{"type": "text", "text": "<turn-context>x"}]
    assert messages[1]["content"][-1].get("cache_control") == {"type": "ephemeral"}  # type: ignore[index,union-attr]
