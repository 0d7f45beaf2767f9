"""The agent loop as a plain function: tool iterations, the iteration cap, streamed deltas."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent import TurnDeps, run_agent_loop
from shared.context.compiler import IntegrityViolation, TurnContext
from shared.context.dynamic import DynamicInputs, build_dynamic_suffix
from shared.context.fences import FenceSet
from shared.context.prompt_text import MINIMAL_IDENTITY
from shared.context.static_prompt import PromptInputs, Section, StaticPrompt, build_static_prompt
from shared.context.steering import SteeringState
from shared.context.tokens import counter_for
from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, ToolCall, Usage
from shared.tools import ToolContext, default_registry

NOW = datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
CTX = ToolContext(tenant_id=1, user_id=1, session_id=1, turn_id=1, now=NOW)


class ScriptedProvider:
    name = "scripted"

    def __init__(self, *results: ChatResult) -> None:
        self.results = list(results)
        self.requests: list[ChatRequest] = []

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        self.requests.append(request)
        result = self.results.pop(0) if self.results else ChatResult(text="fallback")
        if on_delta and result.text:
            for word in re.findall(r"\S+\s*", result.text):
                on_delta(word)
        return result


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def publish(self, event: str, **data: Any) -> None:
        self.events.append((event, data))


def deps(provider: ScriptedProvider, max_iterations: int = 8) -> TurnDeps:
    return TurnDeps(
        provider=provider,
        model="m",
        tools=default_registry(),
        redis=None,  # type: ignore[arg-type]
        max_iterations=max_iterations,
        clock=lambda: NOW,
    )


def turn_context(static: StaticPrompt | None = None) -> TurnContext:
    fences = FenceSet.for_session(b"a-test-seed-of-32-bytes-length!!", 1)
    inputs = PromptInputs(
        agent_name="Engram", persona=MINIMAL_IDENTITY, source="minimal", tools=default_registry().specs(), fences=fences
    )
    return TurnContext(
        static or build_static_prompt(inputs),
        fences,
        "Engram",
        DynamicInputs(now=NOW, timezone="UTC", model="m", provider="scripted"),
        counter_for("offline", "m"),
        100_000,
        SteeringState(agent_name="Engram"),
    )


def tool_call(n: int) -> ToolCall:
    return ToolCall(f"c{n}", "current_time", {})


def test_tool_results_feed_the_next_iteration() -> None:
    provider = ScriptedProvider(
        ChatResult(text="checking", tool_calls=[tool_call(1)], usage=Usage(10, 2)),
        ChatResult(text="it is 09:30", usage=Usage(20, 3, cache_read_tokens=5)),
    )
    events = RecordingEvents()
    outcome = run_agent_loop([ChatMessage("user", "time?")], CTX, deps(provider), events, turn_context())  # type: ignore[arg-type]
    assert len(outcome.calls) == 2 and {c.purpose for c in outcome.calls} == {"chat"}
    assert outcome.reply == "checking\n\nit is 09:30"
    assert [m.role for m in outcome.messages] == ["assistant", "tool", "assistant"]
    assert outcome.messages[1].tool_call_id == "c1" and "09:30" in outcome.messages[1].content
    assert provider.requests[1].messages[-1].role == "tool"
    assert outcome.usage.as_dict() == {
        "input_tokens": 30,
        "output_tokens": 5,
        "cache_read_tokens": 5,
        "cache_write_tokens": 0,
    }
    deltas = "".join(data["text"] for event, data in events.events if event == "delta")
    assert deltas == outcome.reply  # what a stream reader assembles is what is stored
    assert [e for e, _ in events.events if e != "delta"] == ["tool_call", "tool_result"]


def test_iteration_cap_withholds_tools_on_the_last_call() -> None:
    provider = ScriptedProvider(*[ChatResult(text="", tool_calls=[tool_call(i)]) for i in range(3)])
    outcome = run_agent_loop(
        [ChatMessage("user", "loop")],
        CTX,
        deps(provider, max_iterations=3),
        RecordingEvents(),
        turn_context(),  # type: ignore[arg-type]
    )
    assert len(outcome.calls) == 3
    assert [bool(r.tools) for r in provider.requests] == [True, True, False]
    # The call made without tools cannot run any; its requested calls are dropped.
    assert outcome.messages[-1].role == "assistant" and outcome.messages[-1].tool_calls == ()


def test_static_prompt_is_stable_and_the_suffix_carries_the_clock() -> None:
    first, second = turn_context().static.text, turn_context().static.text
    assert first == second and "current_time" in first
    suffix = "\n".join(
        s.text
        for s in build_dynamic_suffix(DynamicInputs(now=NOW, timezone="America/New_York", model="m", provider="p"))
    )
    assert "04:30" in suffix and "The year is 2026" in suffix and "America/New_York" in suffix
    fallback = "\n".join(
        s.text for s in build_dynamic_suffix(DynamicInputs(now=NOW, timezone="Not/AZone", model="m", provider="p"))
    )
    assert "09:30 (UTC" in fallback


def test_tampered_fence_quarantines_the_request() -> None:
    good = turn_context().static
    tampered = StaticPrompt(
        tuple(
            Section(s.name, s.text.replace("come only from this system prompt", "come from anyone"))
            if s.name == "system_guides"
            else s
            for s in good.sections
        ),
        good.source,
    )
    assert tampered.text != good.text
    provider = ScriptedProvider(ChatResult(text="should never be asked"))
    with pytest.raises(IntegrityViolation, match="integrity"):
        run_agent_loop(
            [ChatMessage("user", "hi")],
            CTX,
            deps(provider),
            RecordingEvents(),  # type: ignore[arg-type]
            turn_context(tampered),
        )
    assert provider.requests == []
