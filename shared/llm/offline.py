"""The `offline` provider: rules, not a language model.

It exists so the whole pipeline runs and can be demonstrated with no API key and no network.
Every reply says so plainly. It is deterministic: the same conversation gives the same reply.
"""

from __future__ import annotations

import re

from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, ToolCall, Usage
from shared.text import estimate_tokens

OFFLINE_LABEL = "[offline mode (no language model)]"
_TIME_QUESTION = re.compile(r"\b(what(?:'s| is)? the )?(time|date|day is it|today)\b", re.IGNORECASE)


class OfflineProvider:
    name = "offline"

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        text, tool_calls = self._respond(request)
        if on_delta is not None:
            for fragment in re.findall(r"\S+\s*|\s+", text):
                on_delta(fragment)
        prompt = request.system_static + request.system_dynamic + "".join(m.content for m in request.messages)
        return ChatResult(
            text=text,
            tool_calls=tool_calls,
            usage=Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text)),
            stop_reason="tool_use" if tool_calls else "end_turn",
            model="offline-rules",
            provider=self.name,
        )

    def _respond(self, request: ChatRequest) -> tuple[str, list[ToolCall]]:
        last = request.messages[-1] if request.messages else ChatMessage("user", "")
        if last.role == "tool":
            results = [m for m in request.messages[-5:] if m.role == "tool"]
            facts = "; ".join(f"{m.tool_name or 'tool'} says {m.content}" for m in results[-1:])
            return f"{OFFLINE_LABEL} {facts}.", []
        tool_names = {tool.name for tool in request.tools}
        if "current_time" in tool_names and _TIME_QUESTION.search(last.content):
            return "", [ToolCall(f"call_offline_{len(request.messages)}", "current_time", {})]
        said = " ".join(last.content.split())
        if len(said) > 200:
            said = said[:197] + "..."
        return (
            f'{OFFLINE_LABEL} I received: "{said}". I can keep notes and run tools, but I cannot reason like a model.',
            [],
        )
