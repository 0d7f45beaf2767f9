"""The tools an agent may call: a name, a JSON schema for its arguments and a plain function.

Handlers get a `ToolContext` (who is asking, in which session) and the parsed arguments, and
return text for the model. A handler raising `ToolError` reports a problem to the model instead
of failing the turn; the model can then correct itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema

from shared.infra.logging import get_logger
from shared.llm.types import ToolSpec

log = get_logger(__name__)


class ToolError(Exception):
    """A problem the model should see (bad arguments, nothing found), not a crash."""


@dataclass(frozen=True)
class ToolContext:
    tenant_id: int
    user_id: int
    session_id: int
    turn_id: int
    now: datetime
    timezone: str = "UTC"
    # Called with a memory id after a tool committed new text for it (enqueues its embedding).
    memory_written: Callable[[int], None] | None = None


ToolHandler = Callable[[ToolContext, dict[str, Any]], str]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool


@dataclass
class ToolRegistry:
    tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self.tools[tool.name] = tool

    def specs(self) -> tuple[ToolSpec, ...]:
        # Sorted so the tool block of the prompt is byte-identical from request to request.
        return tuple(self.tools[name].spec for name in sorted(self.tools))

    def execute(self, ctx: ToolContext, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome(f"error: unknown tool {name!r}; available: {', '.join(sorted(self.tools))}", True)
        try:
            jsonschema.validate(arguments, tool.parameters)
        except jsonschema.ValidationError as exc:
            return ToolOutcome(f"error: invalid arguments for {name}: {exc.message}", True)
        try:
            return ToolOutcome(tool.handler(ctx, arguments), False)
        except ToolError as exc:
            return ToolOutcome(f"error: {exc}", True)
        except Exception as exc:
            # A bug in one tool must not fail (and endlessly retry) the whole turn.
            log.exception("tool crashed", tool=name)
            return ToolOutcome(f"error: tool {name} failed: {type(exc).__name__}: {exc}", True)
