"""What an OpenAI-compatible caller asked of its turn, as stored in `turns.client`.

The caller's own tools are offered to the model next to engram's; a call of one of them is not run
here: it ends the turn and goes back to the caller, whose next request brings the result. Its system
messages are instructions from the application (the key holder), shown after engram's prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.llm.types import ToolSpec

INSTRUCTIONS_TITLE = "## Instructions from the calling application"


@dataclass(frozen=True)
class ClientOptions:
    tools: tuple[ToolSpec, ...] = ()
    instructions: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    model: str = ""
    inputs: int = 1  # how many of the turn's messages the caller sent (the first ones by id)

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(tool.name for tool in self.tools)

    def output_tokens(self, configured: int) -> int:
        """The caller's max_tokens, never above the operator's ENGRAM_MAX_OUTPUT_TOKENS."""
        return configured if self.max_tokens is None else max(1, min(self.max_tokens, configured))

    def instructions_section(self) -> str:
        return f"\n\n{INSTRUCTIONS_TITLE}\n{self.instructions}" if self.instructions.strip() else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in self.tools],
            "instructions": self.instructions,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "model": self.model,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> ClientOptions | None:
        if not raw:
            return None
        return cls(
            tools=tuple(ToolSpec(t["name"], t.get("description", ""), t["parameters"]) for t in raw.get("tools", [])),
            instructions=raw.get("instructions") or "",
            max_tokens=raw.get("max_tokens"),
            temperature=raw.get("temperature"),
            model=raw.get("model") or "",
            inputs=int(raw.get("inputs", 1)),
        )


def merged_tools(own: tuple[ToolSpec, ...], client: ClientOptions | None) -> tuple[ToolSpec, ...]:
    """engram's tools and the caller's, sorted by name (a stable prompt prefix for the same tool set)."""
    if client is None or not client.tools:
        return own
    return tuple(sorted((*own, *client.tools), key=lambda tool: tool.name))
