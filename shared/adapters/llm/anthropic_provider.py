"""Chat provider for Anthropic's Messages API, through the official `anthropic` SDK; the request's
layout (order, cache breakpoints, dynamic tail) is anthropic_layout.py's."""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic.types import Message

from shared.adapters.llm.anthropic_layout import build_system, build_tools, layout_messages
from shared.adapters.llm.retry import DeltaTracker
from shared.adapters.llm.streamed import StreamedProvider
from shared.adapters.sdk_clients import anthropic_client
from shared.llm.types import ChatRequest, ChatResult, ToolCall, Usage


class AnthropicProvider(StreamedProvider[Message]):
    name: str = "anthropic"
    client: anthropic.Anthropic

    def _client(self, *, api_key: str | None, base_url: str | None, timeout: float) -> anthropic.Anthropic:
        return anthropic_client(api_key=api_key, base_url=_without_v1(base_url), timeout=timeout)

    def _result(self, streamed: Message, request: ChatRequest) -> ChatResult:
        return _to_result(streamed, provider=self.name)

    def _stream_once(self, request: ChatRequest, on_text: DeltaTracker) -> Message:
        system = build_system(request)
        tools = build_tools(request.tools)
        # The SDK no longer exposes `temperature` as a keyword; the API still accepts it in the body.
        extra_body = {"temperature": request.temperature} if request.temperature is not None else None
        with self.client.messages.stream(
            model=request.model,
            max_tokens=request.max_tokens,
            messages=layout_messages(request),
            system=system if system else anthropic.omit,
            tools=tools if tools else anthropic.omit,
            extra_body=extra_body,
        ) as stream:
            for text in stream.text_stream:
                on_text(text)
            return stream.get_final_message()


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
