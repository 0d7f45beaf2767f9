"""The system prompt the agent loop sends: a cache-stable static part and a per-iteration suffix.

The static part must stay byte-identical across iterations and turns while its inputs are
unchanged (that is what lets providers serve it from their prompt cache), so it holds nothing
that changes by itself: no clock, no counters. Time and other volatile facts go in the suffix.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.llm.types import ToolSpec

IDENTITY = (
    "You are a helpful assistant with durable memory, served by engram. You talk with one user "
    "across many sessions. Be accurate and concise; say so when you do not know something."
)


def build_static_prompt(tools: tuple[ToolSpec, ...]) -> str:
    parts = [IDENTITY]
    if tools:
        listing = "\n".join(f"- {tool.name}: {tool.description}" for tool in tools)
        parts.append(f"## Tools\nYou can call these tools and only these:\n{listing}")
    return "\n\n".join(parts)


def build_dynamic_suffix(now: datetime, timezone: str, model: str) -> str:
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone, timezone = ZoneInfo("UTC"), "UTC"
    local = now.astimezone(zone)
    return f"Current date and time: {local:%A %d %B %Y, %H:%M} ({timezone}). The year is {local.year}.\nModel: {model}."
