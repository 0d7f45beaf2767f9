"""The dynamic context: rebuilt every iteration and sent last, after the conversation (tail.py), so what
changes by itself (the clock, the summary, relevant memories, memories written since the session's
prompt epoch) never disturbs the cached prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.context.data_fence import fence
from shared.context.fences import strip_markers
from shared.context.static_prompt import Section
from shared.infra.db import Query
from shared.memory.rows import MemoryEntry

RELEVANT_LIMIT = 5


@dataclass(frozen=True)
class DynamicInputs:
    now: datetime
    timezone: str
    model: str
    provider: str
    channel: str = "api"
    active_task: str | None = None
    summary: str | None = None
    relevant: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)  # MemoryLine's {namespace, key, value}
    reflection: str | None = None
    # Tacit memories that joined "What You Know" after the session's prompt epoch (epoch.py).
    since_epoch: tuple[MemoryEntry, ...] = field(default_factory=tuple)


def local_time(now: datetime, timezone: str) -> tuple[datetime, str]:
    try:
        return now.astimezone(ZoneInfo(timezone)), timezone
    except (ZoneInfoNotFoundError, ValueError):
        return now.astimezone(ZoneInfo("UTC")), "UTC"


def describe_time(now: datetime, timezone: str) -> str:
    local, zone = local_time(now, timezone)
    offset = local.strftime("%z")
    return f"{local:%A %d %B %Y}, {local:%H:%M} ({zone}, UTC{offset[:3]}:{offset[3:]}). The year is {local.year}."


def build_dynamic_suffix(inputs: DynamicInputs) -> list[Section]:
    sections = [
        Section("datetime", f"Current date and time: {describe_time(inputs.now, inputs.timezone)}"),
        Section("system", f"[System context]\nModel: {inputs.provider}/{inputs.model}\nChannel: {inputs.channel}"),
    ]
    if inputs.active_task:
        sections.append(
            Section(
                "active_task",
                "## Active task\nYou are working on: "
                f"{strip_markers(inputs.active_task)}\nKeep every step in service of it.",
            )
        )
    if inputs.summary:
        sections.append(Section("summary", f"[Previous conversation summary]\n{strip_markers(inputs.summary)}"))
    if inputs.since_epoch:
        lines = [f"- [{m['namespace']}] {m['key']}: {strip_markers(m['value'])}" for m in inputs.since_epoch]
        sections.append(
            Section(
                "what_you_know_since",
                "## What You Know (learned since this conversation's prompt was built)\n" + fence("memory", lines),
            )
        )
    if inputs.relevant:
        lines = [f"- [{m['namespace']}] {m['key']}: {strip_markers(m['value'])}" for m in inputs.relevant]
        sections.append(
            Section("relevant_memory", "## Relevant memory (from other conversations)\n" + fence("memory", lines))
        )
    if inputs.reflection:
        reflection = fence("reflection", [strip_markers(inputs.reflection)])
        sections.append(Section("reflection", f"## Latest weekly reflection\n{reflection}"))
    return sections


def reflection_query(tenant_id: int, user_id: int) -> Query:
    return (
        """SELECT id, value FROM memories WHERE tenant_id = %s AND user_id = %s AND kind = 'reflection'
           AND valid_until IS NULL ORDER BY created_at DESC, id DESC LIMIT 1""",
        (tenant_id, user_id),
    )
