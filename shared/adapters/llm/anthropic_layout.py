"""An Anthropic Messages request laid out for the prompt cache.

Anthropic caches prefixes in the order tools → system → messages, up to each `cache_control`
breakpoint (at most 4 per request); a later request reads the longest cached prefix it shares, found
at its own breakpoints or up to 20 blocks before each of them. So:

- the static system prompt carries the first breakpoint (it caches the tools too);
- the history follows, append-only: the last block of the history carries a breakpoint, and so does
  the last block of the user turn before it — the previous request's last breakpoint, both within a
  tool loop and from one turn to the next — so the previous prefix is hit exactly, however many tool
  blocks came in between (the 20-block lookback alone would miss after many parallel tool calls);
- the dynamic tail goes last, as a text block after the last user turn's content, uncached.

Three breakpoints at most. Everything before the tail is byte-identical to what the previous request
sent, except the `cache_control` markers, which are not part of what is cached.
"""

from __future__ import annotations

from typing import Any, cast

from anthropic.types import MessageParam, TextBlockParam, ToolParam

from shared.llm.types import ChatMessage, ChatRequest, ToolCall, ToolSpec

EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API refuses more


def build_tools(tools: tuple[ToolSpec, ...]) -> list[ToolParam]:
    # Sorted so the same tool set always yields the same bytes, and therefore the same cache prefix.
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in sorted(tools, key=lambda tool: tool.name)
    ]


def build_system(request: ChatRequest) -> list[TextBlockParam]:
    """The static prompt as one block with the first breakpoint (which also caches the tools)."""
    if not request.system_static:
        return []
    return [{"type": "text", "text": request.system_static, "cache_control": {"type": "ephemeral"}}]


def build_messages(messages: tuple[ChatMessage, ...]) -> list[MessageParam]:
    """The history as Anthropic turns, with no breakpoints and no tail: what an earlier request's
    prefix looked like. Consecutive same-role turns are merged (the API requires alternation)."""
    return [_to_param(role, blocks) for role, blocks in _turns(messages)]


def layout_messages(request: ChatRequest) -> list[MessageParam]:
    """The history with its rolling breakpoints, then the dynamic tail."""
    turns = _turns(request.messages)
    if turns:
        last = len(turns) - 1
        _mark(turns[last][1])
        previous = next((i for i in range(last - 1, -1, -1) if turns[i][0] == "user"), None)
        if previous is not None:
            _mark(turns[previous][1])
    params = [_to_param(role, blocks) for role, blocks in turns]
    if request.dynamic_tail:
        tail: dict[str, Any] = {"type": "text", "text": request.dynamic_tail}
        if turns and turns[-1][0] == "user":
            params[-1] = cast(MessageParam, {"role": "user", "content": [*turns[-1][1], tail]})
        else:  # no user turn to end (the history ends with the assistant): the tail is one of its own
            params.append(cast(MessageParam, {"role": "user", "content": [tail]}))
    return params


def breakpoints(system: list[Any], messages: list[Any]) -> int:
    """How many `cache_control` markers a request carries (tests and the fake check ≤ MAX_BREAKPOINTS)."""
    blocks = [*system, *(b for m in messages if isinstance(m.get("content"), list) for b in m["content"])]
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))


def _mark(blocks: list[dict[str, Any]]) -> None:
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}


def _turns(messages: tuple[ChatMessage, ...]) -> list[tuple[str, list[dict[str, Any]]]]:
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"  # tool results travel as user turns
        blocks = _blocks_of(message)
        if not blocks:
            continue  # an empty assistant turn is rejected by the API and carries no information
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


def _blocks_of(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "user":
        return [{"type": "text", "text": message.content}]
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
                "is_error": message.is_error,
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(_tool_use_block(call) for call in message.tool_calls)
    return blocks


def _tool_use_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}


def _to_param(role: str, blocks: list[dict[str, Any]]) -> MessageParam:
    if role == "assistant":
        return cast(MessageParam, {"role": "assistant", "content": blocks})
    only = blocks[0]
    if len(blocks) == 1 and only["type"] == "text" and "cache_control" not in only:
        # Plain user text keeps the simple wire form; the API caches it exactly as a single text block.
        return {"role": "user", "content": only["text"]}
    return cast(MessageParam, {"role": "user", "content": blocks})
