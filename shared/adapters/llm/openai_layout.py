"""An OpenAI Chat Completions request laid out for automatic prefix caching.

OpenAI (and compatible servers with prefix caching: vLLM, SGLang, llama.cpp) reuse the longest
previously computed prefix of the prompt, tools first. The order that makes the most of it is the
same as for Anthropic: tools → the static system prompt → the history (append-only) → the dynamic
tail. The tail is appended to the content of the last message (the user's message, or the last tool
result in a tool loop), separated by a blank line; it is never a message of its own, so servers
whose chat templates insist on alternating roles or a single leading system message accept it.
"""

from __future__ import annotations

import json
from dataclasses import replace

from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from shared.llm.types import ChatMessage, ChatRequest, ToolCall, ToolSpec

TAIL_SEPARATOR = "\n\n"


def build_tools(tools: tuple[ToolSpec, ...]) -> list[ChatCompletionFunctionToolParam]:
    # Sorted so the same tool set always yields the same bytes, and therefore the same cache prefix.
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in sorted(tools, key=lambda tool: tool.name)
    ]


def build_messages(request: ChatRequest) -> list[ChatCompletionMessageParam]:
    """System prompt, history, and the dynamic tail at the very end."""
    history = list(request.messages)
    tail = request.dynamic_tail
    if tail and history and history[-1].role in ("user", "tool"):
        last = history[-1]
        history[-1] = replace(last, content=last.content + TAIL_SEPARATOR + tail)
        tail = ""
    out: list[ChatCompletionMessageParam] = []
    if request.system_static:
        out.append({"role": "system", "content": request.system_static})
    out.extend(_message_param(message) for message in history)
    if tail:  # no user-side message to carry it (an empty history, or one ending with the assistant)
        out.append({"role": "user", "content": tail})
    return out


def _message_param(message: ChatMessage) -> ChatCompletionMessageParam:
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    return {
        "role": "assistant",
        "content": message.content or None,
        "tool_calls": [_tool_call_param(call) for call in message.tool_calls],
    }


def _tool_call_param(call: ToolCall) -> ChatCompletionMessageFunctionToolCallParam:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }
