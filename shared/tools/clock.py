"""current_time: the date and time in a given (or the user's) time zone."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.tools.registry import Tool, ToolContext, ToolError


def current_time(ctx: ToolContext, args: dict[str, Any]) -> str:
    zone_name = args.get("timezone") or ctx.timezone
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(f"unknown time zone {zone_name!r}; use an IANA name such as Europe/Lisbon") from exc
    local = ctx.now.astimezone(zone)
    return f"{local:%A %d %B %Y, %H:%M} ({zone_name}, UTC{local:%z})"


CURRENT_TIME = Tool(
    name="current_time",
    description="Get the current date and time, optionally in a given IANA time zone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA zone, e.g. Europe/Lisbon"}},
        "additionalProperties": False,
    },
    handler=current_time,
)
