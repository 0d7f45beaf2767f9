"""The agent loop as a plain function: tool iterations, the iteration cap, streamed deltas."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from shared.agent import TurnDeps, run_agent_loop
from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, ToolCall, Usage
from shared.prompt import build_dynamic_suffix, build_static_prompt
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


def tool_call(n: int) -> ToolCall:
    return ToolCall(f"c{n}", "current_time", {})


def test_tool_results_feed_the_next_iteration() -> None:
    provider = ScriptedProvider(
        ChatResult(text="checking", tool_calls=[tool_call(1)], usage=Usage(10, 2)),
        ChatResult(text="it is 09:30", usage=Usage(20, 3, cache_read_tokens=5)),
    )
    events = RecordingEvents()
    outcome = run_agent_loop([ChatMessage("user", "time?")], CTX, deps(provider), events)  # type: ignore[arg-type]
    assert outcome.llm_calls == 2
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
    outcome = run_agent_loop([ChatMessage("user", "loop")], CTX, deps(provider, max_iterations=3), RecordingEvents())  # type: ignore[arg-type]
    assert outcome.llm_calls == 3
    assert [bool(r.tools) for r in provider.requests] == [True, True, False]
    # The call made without tools cannot run any; its requested calls are dropped.
    assert outcome.messages[-1].role == "assistant" and outcome.messages[-1].tool_calls == ()


def test_static_prompt_is_stable_and_the_suffix_carries_the_clock() -> None:
    specs = default_registry().specs()
    assert build_static_prompt(specs) == build_static_prompt(specs)
    assert "current_time" in build_static_prompt(specs)
    suffix = build_dynamic_suffix(NOW, "America/New_York", "m")
    assert "04:30" in suffix and "The year is 2026" in suffix and "America/New_York" in suffix
    assert "09:30 (UTC)" in build_dynamic_suffix(NOW, "Not/AZone", "m")
