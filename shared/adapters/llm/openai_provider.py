"""Chat provider for OpenAI Chat Completions and compatible servers (Ollama, vLLM, ...)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from shared.adapters.llm.openai_layout import build_messages, build_tools
from shared.adapters.llm.retry import DeltaTracker
from shared.adapters.llm.streamed import StreamedProvider
from shared.adapters.sdk_clients import openai_client
from shared.llm.types import ChatRequest, ChatResult, ToolCall, Usage


class OpenAIProvider(StreamedProvider["_StreamState"]):
    name: str = "openai"
    client: openai.OpenAI

    def _client(self, *, api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
        return openai_client(api_key=api_key, base_url=base_url, timeout=timeout)

    def _result(self, streamed: _StreamState, request: ChatRequest) -> ChatResult:
        return streamed.to_result(provider=self.name, fallback_model=request.model)

    def _stream_once(self, request: ChatRequest, on_text: DeltaTracker) -> _StreamState:
        tools = build_tools(request.tools)
        state = _StreamState()
        with self.client.chat.completions.create(
            model=request.model,
            messages=build_messages(request),
            tools=tools if tools else openai.omit,
            # `max_tokens` rather than `max_completion_tokens`: compatible servers only know the former.
            max_tokens=request.max_tokens,
            temperature=request.temperature if request.temperature is not None else openai.omit,
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            for chunk in stream:
                state.consume(chunk, on_text)
        return state


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""

    def finish(self, index: int) -> ToolCall:
        # Some compatible servers omit the id; the follow-up tool message still needs one.
        call_id = self.id or f"call_{index}"
        return ToolCall(id=call_id, name=self.name, arguments=parse_arguments(self.arguments))


@dataclass
class _StreamState:
    """What has arrived so far; tool calls come in fragments keyed by their index."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialToolCall] = field(default_factory=dict)
    usage: CompletionUsage | None = None
    finish_reason: str | None = None
    model: str = ""

    def consume(self, chunk: ChatCompletionChunk, on_text: DeltaTracker) -> None:
        self.model = chunk.model or self.model
        if chunk.usage is not None:  # the last chunk, when include_usage is honoured
            self.usage = chunk.usage
        for choice in chunk.choices[:1]:
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            if choice.delta.content:
                self.text.append(choice.delta.content)
                on_text(choice.delta.content)
            for fragment in choice.delta.tool_calls or ():
                partial = self.calls.setdefault(fragment.index, _PartialToolCall())
                partial.id = fragment.id or partial.id
                if fragment.function is not None:
                    # The name arrives whole in the first fragment; some servers repeat it later.
                    partial.name = partial.name or fragment.function.name or ""
                    partial.arguments += fragment.function.arguments or ""

    def to_result(self, *, provider: str, fallback_model: str) -> ChatResult:
        return ChatResult(
            text="".join(self.text),
            tool_calls=[call.finish(index) for index, call in sorted(self.calls.items())],
            usage=_to_usage(self.usage),
            stop_reason=self.finish_reason,
            model=self.model or fallback_model,
            provider=provider,
        )


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool arguments as a dict; malformed JSON is kept verbatim under `_raw` for the tool to report."""
    if not raw.strip():
        return {}  # some servers send no arguments at all for parameterless tools
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


def _to_usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:  # servers that ignore stream_options send no usage at all
        return Usage()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(
        input_tokens=max(usage.prompt_tokens - cached, 0),
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=0,  # OpenAI caches automatically and does not bill writes separately
    )
