"""The `offline` provider: rules, not a language model.

It exists so the whole pipeline runs and can be demonstrated with no API key and no network.
Every reply says so plainly. It is deterministic: the same conversation gives the same reply.
"""

from __future__ import annotations

import json
import re

from shared.llm.types import ChatMessage, ChatRequest, ChatResult, DeltaCallback, ToolCall, Usage
from shared.text import estimate_tokens

OFFLINE_LABEL = "[offline mode (no language model)]"


def is_offline_reply(role: str, content: str) -> bool:
    """A reply of these rules: it echoes the conversation or lists memories, so it is not conversation to
    remember (no transcript unit, no line in another's context, not read by extraction or summaries; the
    database's engram_is_conversational, migration 0026, says the same)."""
    return role == "assistant" and content.startswith(OFFLINE_LABEL)


_MEMORY_QUESTION = re.compile(r"\b(remember|know|recall)\b.*\b(me|my|i)\b", re.IGNORECASE)
# Remembered facts appear in the prompt as "- [namespace] key: value" lines ("What You Know",
# "Relevant memory"); the rules read them back instead of reasoning over them.
_MEMORY_LINE = re.compile(r"^- \[[^\]]+\] (.+)$", re.MULTILINE)
_TIME_QUESTION = re.compile(r"\b(what(?:'s| is)? the )?(time|date|day is it|today)\b", re.IGNORECASE)


# Asked what it remembers, it lists the user's memories with this tool first, as a model would: the prompt
# only carries tacit memories and other sessions' facts, not what this conversation stored a moment ago
# under entity/default (a name, a city).
_LIST_TOOL = "memory_list"
_RECALL_LIMIT = 12


def _remembered(request: ChatRequest) -> list[str]:
    lines = _MEMORY_LINE.findall(request.system_static) + _MEMORY_LINE.findall(request.dynamic_tail)
    return list(dict.fromkeys(line.strip() for line in lines))


def _listed(tool_output: str) -> list[str]:
    """ "key: value" of each memory in a memory_list result (a JSON list), newest first."""
    try:
        rows = json.loads(tool_output)
    except ValueError:
        return []
    if not isinstance(rows, list):
        return []
    return [
        f"{row['key']}: {row['value']}"
        for row in rows
        if isinstance(row, dict) and isinstance(row.get("key"), str) and isinstance(row.get("value"), str)
    ]


class OfflineProvider:
    name = "offline"

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        text, tool_calls = self._respond(request)
        if on_delta is not None:
            for fragment in re.findall(r"\S+\s*|\s+", text):
                on_delta(fragment)
        prompt = request.system_static + request.dynamic_tail + "".join(m.content for m in request.messages)
        return ChatResult(
            text=text,
            tool_calls=tool_calls,
            usage=Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(text)),
            stop_reason="tool_use" if tool_calls else "end_turn",
            model="offline-rules",
            provider=self.name,
        )

    def _recall(self, request: ChatRequest, listed: list[str] | None = None) -> str:
        remembered = list(dict.fromkeys([*(listed or []), *_remembered(request)]))
        if not remembered:
            return f"{OFFLINE_LABEL} I don't have anything remembered about you yet."
        listing = "; ".join(remembered[:_RECALL_LIMIT])
        return f"{OFFLINE_LABEL} Here is what I remember about you: {listing}."

    def _respond(self, request: ChatRequest) -> tuple[str, list[ToolCall]]:
        # Steering notes are addressed to a model; the rules answer the conversation itself.
        spoken = [m for m in request.messages if not (m.role == "user" and m.content.lstrip().startswith("<steering"))]
        last = spoken[-1] if spoken else ChatMessage("user", "")
        if last.role == "tool" and last.tool_name == _LIST_TOOL:
            return self._recall(request, _listed(last.content)), []
        if last.role == "tool":
            results = [m for m in request.messages[-5:] if m.role == "tool"]
            facts = "; ".join(f"{m.tool_name or 'tool'} says {m.content}" for m in results[-1:])
            return f"{OFFLINE_LABEL} {facts}.", []
        tool_names = {tool.name for tool in request.tools}
        if "current_time" in tool_names and _TIME_QUESTION.search(last.content):
            return "", [ToolCall(f"call_offline_{len(request.messages)}", "current_time", {})]
        if _MEMORY_QUESTION.search(last.content):
            if _LIST_TOOL in tool_names:
                return "", [ToolCall(f"call_offline_{len(request.messages)}", _LIST_TOOL, {"limit": 50})]
            return self._recall(request), []
        said = " ".join(last.content.split())
        if len(said) > 200:
            said = said[:197] + "..."
        return (
            f'{OFFLINE_LABEL} I received: "{said}". I can keep notes and run tools, but I cannot reason like a model.',
            [],
        )
