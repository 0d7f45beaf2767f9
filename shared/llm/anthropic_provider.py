"""Chat provider for Anthropic's Messages API, through the official `anthropic` SDK."""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic.types import (
    ContentBlockParam,
    Message,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

from shared.llm.retry import DEFAULT_RETRY_POLICY, DeltaTracker, RetryPolicy, call_with_retries
from shared.llm.sdk import anthropic_client
from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, ToolCall, ToolSpec, Usage


class AnthropicProvider:
    name: str = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 120.0,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> None:
        # The SDK's own retries are off so `retry` is the only policy; only the arguments configure the
        # client, never ANTHROPIC_* variables (see sdk.py).
        self.client = anthropic_client(api_key=api_key, base_url=_without_v1(base_url), timeout=timeout)
        self.retry = retry

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        tracker = DeltaTracker(on_delta)
        message = call_with_retries(
            lambda: self._stream_once(request, tracker),
            provider=self.name,
            policy=self.retry,
            replay_safe=lambda: not tracker.delivered,
        )
        return _to_result(message, provider=self.name)

    def _stream_once(self, request: ChatRequest, on_text: DeltaTracker) -> Message:
        system = build_system(request)
        tools = build_tools(request.tools)
        # The SDK no longer exposes `temperature` as a keyword; the API still accepts it in the body.
        extra_body = {"temperature": request.temperature} if request.temperature is not None else None
        with self.client.messages.stream(
            model=request.model,
            max_tokens=request.max_tokens,
            messages=build_messages(request.messages),
            system=system if system else anthropic.omit,
            tools=tools if tools else anthropic.omit,
            extra_body=extra_body,
        ) as stream:
            for text in stream.text_stream:
                on_text(text)
            return stream.get_final_message()


def build_system(request: ChatRequest) -> list[TextBlockParam]:
    """Static part first with the cache breakpoint, so the per-iteration dynamic part never busts it.

    Anthropic's prefix order is tools → system → messages, so this breakpoint also caches the tools.
    """
    blocks: list[TextBlockParam] = []
    if request.system_static:
        blocks.append({"type": "text", "text": request.system_static, "cache_control": {"type": "ephemeral"}})
    if request.system_dynamic:
        blocks.append({"type": "text", "text": request.system_dynamic})
    return blocks


def build_tools(tools: tuple[ToolSpec, ...]) -> list[ToolParam]:
    # Sorted so the same tool set always yields the same bytes, and therefore the same cache prefix.
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in sorted(tools, key=lambda tool: tool.name)
    ]


def build_messages(messages: tuple[ChatMessage, ...]) -> list[MessageParam]:
    """Convert to Anthropic turns, merging consecutive same-role turns (the API requires alternation)."""
    turns: list[tuple[str, list[ContentBlockParam]]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"  # tool results travel as user turns
        blocks = _blocks_of(message)
        if not blocks:
            continue  # an empty assistant turn is rejected by the API and carries no information
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return [_to_param(role, blocks) for role, blocks in turns]


def _blocks_of(message: ChatMessage) -> list[ContentBlockParam]:
    if message.role == "user":
        return [{"type": "text", "text": message.content}]
    if message.role == "tool":
        return [_tool_result_block(message)]
    blocks: list[ContentBlockParam] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(_tool_use_block(call) for call in message.tool_calls)
    return blocks


def _tool_result_block(message: ChatMessage) -> ToolResultBlockParam:
    return {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id or "",
        "content": message.content,
        "is_error": message.is_error,
    }


def _tool_use_block(call: ToolCall) -> ToolUseBlockParam:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}


def _to_param(role: str, blocks: list[ContentBlockParam]) -> MessageParam:
    if role == "assistant":
        return {"role": "assistant", "content": blocks}
    only = blocks[0]
    if len(blocks) == 1 and only["type"] == "text":
        return {"role": "user", "content": only["text"]}  # plain user text keeps the simple wire form
    return {"role": "user", "content": blocks}


def _to_result(message: Message, *, provider: str) -> ChatResult:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name, arguments=_as_arguments(block.input)))
    return ChatResult(
        text="".join(texts),
        tool_calls=calls,
        usage=_to_usage(message),
        stop_reason=message.stop_reason,
        model=message.model,
        provider=provider,
    )


def _as_arguments(value: object) -> dict[str, Any]:
    # The SDK already parses the streamed JSON; a non-object is not valid tool input, keep it visible.
    return dict(value) if isinstance(value, dict) else {"_raw": json.dumps(value)}


def _to_usage(message: Message) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
    )


def _without_v1(base_url: str | None) -> str | None:
    # The SDK appends `/v1/messages` itself; a base URL copied from OpenAI-style config would double it.
    if base_url is None:
        return None
    trimmed = base_url.rstrip("/")
    return trimmed.removesuffix("/v1")
