"""The agent loop as a plain function: tool iterations, the iteration cap, streamed deltas."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent import TurnDeps, run_agent_loop
from shared.context.compiler import IntegrityViolation, TurnContext
from shared.context.dynamic import DynamicInputs, build_dynamic_suffix
from shared.context.fences import FenceSet, strip_markers
from shared.context.prompt_text import MINIMAL_IDENTITY
from shared.context.static_prompt import PromptInputs, Section, StaticPrompt, build_static_prompt
from shared.context.steering import SteeringState
from shared.context.tokens import counter_for
from shared.llm.ledger import CallRecord, LedgerScope
from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, LLMError, ToolCall, Usage
from shared.tools import ToolContext, default_registry

NOW = datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
CTX = ToolContext(tenant_id=1, user_id=1, session_id=1, turn_id=1, now=NOW)


class ScriptedProvider:
    name = "scripted"

    def __init__(self, *results: ChatResult | LLMError, split: str = r"\S+\s*") -> None:
        self.results = list(results)
        self.requests: list[ChatRequest] = []
        self.split = split  # how the reply is cut into streamed fragments

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        self.requests.append(request)
        result = self.results.pop(0) if self.results else ChatResult(text="fallback")
        if isinstance(result, LLMError):
            raise result
        if on_delta and result.text:
            for fragment in re.findall(self.split, result.text, re.DOTALL):
                on_delta(fragment)
        return result


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.flushes = 0

    def publish(self, event: str, **data: Any) -> None:
        self.events.append((event, data))

    def flush(self) -> None:  # the real publisher writes held deltas here; these are never held
        self.flushes += 1


def deps(
    provider: ScriptedProvider, max_iterations: int = 8, ledger: list[tuple[CallRecord, LedgerScope]] | None = None
) -> TurnDeps:
    recorded = ledger if ledger is not None else []
    return TurnDeps(
        provider=provider,
        model="m",
        tools=default_registry(),
        redis=None,  # type: ignore[arg-type]
        max_iterations=max_iterations,
        clock=lambda: NOW,
        record_call=lambda call, scope: recorded.append((call, scope)),
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


MARKER = "⟦F:3fa9c2d17e0b:A⟧"


@pytest.mark.parametrize(
    "split",
    [
        r".",  # one character per fragment: every marker is cut into pieces
        r".{1,3}",
        r"\S+\s*",
    ],
)
def test_fence_markers_never_reach_the_stream_even_split_across_deltas(split: str) -> None:
    first = f"Sure {MARKER} let me check.\n{MARKER}\nOne moment ⟦ F : forged ⟧."
    second = f"It is {MARKER}09:30 ⟦F:0000:B⟧ now. A lone ⟦ bracket stays"
    provider = ScriptedProvider(
        ChatResult(text=first, tool_calls=[tool_call(1)]),
        # An iteration whose text is nothing but a marker adds nothing, not even a paragraph break.
        ChatResult(text=f"{MARKER} ", tool_calls=[tool_call(2)]),
        ChatResult(text=second),
        split=split,
    )
    events = RecordingEvents()
    outcome = run_agent_loop([ChatMessage("user", "time?")], CTX, deps(provider), events, turn_context())  # type: ignore[arg-type]
    deltas = [data["text"] for event, data in events.events if event == "delta"]
    assert "".join(deltas) == outcome.reply  # what a stream reader assembles is what is stored
    assert outcome.reply == strip_markers(first) + "\n\n" + strip_markers(second)
    assert not any("⟦F" in d or "⟧" in d or "F:3fa9" in d for d in deltas)
    assert "A lone ⟦ bracket stays" in outcome.reply


def test_every_call_is_recorded_as_it_happens_even_when_the_turn_fails() -> None:
    provider = ScriptedProvider(
        ChatResult(text="checking", tool_calls=[tool_call(1)], usage=Usage(10, 2)),
        LLMError("scripted returned 400 invalid_request_error: bad request", retryable=False),
    )
    ledger: list[tuple[CallRecord, LedgerScope]] = []
    with pytest.raises(LLMError):
        run_agent_loop(
            [ChatMessage("user", "time?")],
            CTX,
            deps(provider, ledger=ledger),
            RecordingEvents(),  # type: ignore[arg-type]
            turn_context(),
        )
    assert [(call.ok, call.usage.input_tokens) for call, _ in ledger] == [(True, 10), (False, 0)]
    assert {scope for _, scope in ledger} == {LedgerScope(1, 1, 1, 1)}
