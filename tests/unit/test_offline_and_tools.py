"""The offline provider, the tool registry and the clock tool, as plain functions."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import jsonschema

from shared.llm.offline import OFFLINE_LABEL, OfflineProvider
from shared.llm.types import ChatMessage, ChatRequest
from shared.tools import Tool, ToolContext, ToolError, ToolRegistry, default_registry

NOW = datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
CTX = ToolContext(tenant_id=1, user_id=1, session_id=1, turn_id=1, now=NOW, timezone="Europe/Lisbon")


def request(*messages: ChatMessage, tools: bool = True) -> ChatRequest:
    return ChatRequest(model="offline-rules", messages=messages, tools=default_registry().specs() if tools else ())


def test_offline_reply_is_labelled_streamed_and_deterministic() -> None:
    provider = OfflineProvider()
    deltas: list[str] = []
    first = provider.chat(request(ChatMessage("user", "hello there")), deltas.append)
    second = provider.chat(request(ChatMessage("user", "hello there")))
    assert first.text.startswith(OFFLINE_LABEL)
    assert '"hello there"' in first.text
    assert "".join(deltas) == first.text and len(deltas) > 3
    assert first.text == second.text
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0


def test_offline_uses_the_clock_tool_then_reports_its_result() -> None:
    provider = OfflineProvider()
    asked = provider.chat(request(ChatMessage("user", "What time is it?")))
    assert [call.name for call in asked.tool_calls] == ["current_time"]
    call = asked.tool_calls[0]
    answered = provider.chat(
        request(
            ChatMessage("user", "What time is it?"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", "Saturday 21 November 2026, 09:30", tool_call_id=call.id, tool_name="current_time"),
        )
    )
    assert answered.tool_calls == []
    assert "Saturday 21 November 2026, 09:30" in answered.text and answered.text.startswith(OFFLINE_LABEL)


def test_offline_does_not_call_tools_it_was_not_given() -> None:
    result = OfflineProvider().chat(request(ChatMessage("user", "what time is it"), tools=False))
    assert result.tool_calls == []


def test_clock_tool_uses_the_users_zone_or_the_requested_one() -> None:
    registry = default_registry()
    local = registry.execute(CTX, "current_time", {})
    assert not local.is_error and "09:30" in local.content and "Europe/Lisbon" in local.content
    tokyo = registry.execute(CTX, "current_time", {"timezone": "Asia/Tokyo"})
    assert not tokyo.is_error and "18:30" in tokyo.content and "Asia/Tokyo" in tokyo.content
    bad = registry.execute(CTX, "current_time", {"timezone": "Mars/Olympus"})
    assert bad.is_error and "unknown time zone" in bad.content


def test_registry_reports_problems_to_the_model_instead_of_crashing() -> None:
    def explode(_ctx: ToolContext, _args: dict[str, object]) -> str:
        raise RuntimeError("boom")

    def refuse(_ctx: ToolContext, _args: dict[str, object]) -> str:
        raise ToolError("nothing found")

    registry = ToolRegistry()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    registry.register(Tool("explode", "crashes", schema, explode))
    registry.register(Tool("refuse", "refuses", schema, refuse))
    unknown = registry.execute(CTX, "nope", {})
    assert unknown.is_error and "unknown tool 'nope'" in unknown.content and "explode" in unknown.content
    invalid = registry.execute(CTX, "refuse", {"n": "three"})
    assert invalid.is_error and "invalid arguments" in invalid.content
    assert registry.execute(CTX, "refuse", {"n": 3}).content == "error: nothing found"
    crashed = registry.execute(CTX, "explode", {"n": 1})
    assert crashed.is_error and "boom" in crashed.content


def test_tool_specs_are_sorted_for_a_stable_prompt() -> None:
    registry = ToolRegistry()
    schema = {"type": "object"}
    for name in ("zeta", "alpha", "mid"):
        registry.register(Tool(name, name, schema, lambda _c, _a: ""))
    assert [spec.name for spec in registry.specs()] == ["alpha", "mid", "zeta"]


def test_offline_reads_back_remembered_facts_and_ignores_steering() -> None:
    request = ChatRequest(
        model="offline-rules",
        system_static="## What You Know\n- [tacit/preferences] drink: Prefers green tea",
        dynamic_tail="## Relevant memory (from other conversations)\n- [entity/default] user/city: Lives in Lisbon",
        messages=(
            ChatMessage("user", "What do you remember about me?"),
            ChatMessage("user", '<steering name="identity_guard">stay in character</steering>'),
        ),
    )
    text = OfflineProvider().chat(request).text
    assert "drink: Prefers green tea" in text and "user/city: Lives in Lisbon" in text
    assert "steering" not in text
    empty = OfflineProvider().chat(ChatRequest(model="m", messages=(ChatMessage("user", "what do you know about me"),)))
    assert "anything remembered" in empty.text


def test_offline_recall_lists_the_users_memories_including_entities() -> None:
    # The prompt only carries tacit memories; a name and city stored a moment ago (entity/default) are
    # found by listing memories with the tool, as a model would.
    provider = OfflineProvider()
    question = ChatMessage("user", "What do you remember about me?")
    static = "## What You Know\n- [tacit/preferences] drink: Prefers green tea"
    asked = provider.chat(
        ChatRequest(model="offline-rules", messages=(question,), system_static=static, tools=default_registry().specs())
    )
    assert [call.name for call in asked.tool_calls] == ["memory_list"] and asked.text == ""
    call = asked.tool_calls[0]
    jsonschema.validate(call.arguments, default_registry().tools["memory_list"].parameters)  # a valid call
    listed = json.dumps(
        [
            {"id": 2, "namespace": "entity/default", "key": "user/location", "value": "User lives in Lisbon"},
            {"id": 1, "namespace": "entity/default", "key": "user/name", "value": "User's name is Alice"},
            {"id": 3, "namespace": "tacit/preferences", "key": "drink", "value": "Prefers green tea"},
        ]
    )
    answered = provider.chat(
        ChatRequest(
            model="offline-rules",
            system_static=static,
            tools=default_registry().specs(),
            messages=(
                question,
                ChatMessage("assistant", "", tool_calls=(call,)),
                ChatMessage("tool", listed, tool_call_id=call.id, tool_name="memory_list"),
            ),
        )
    )
    assert answered.tool_calls == [] and answered.text.startswith(OFFLINE_LABEL)
    assert "User's name is Alice" in answered.text and "User lives in Lisbon" in answered.text
    assert answered.text.count("Prefers green tea") == 1  # in the list and the prompt: said once
