"""Agent tools. `default_registry()` is what the agent loop registers."""

from shared.tools.clock import CURRENT_TIME
from shared.tools.memory_tools import MEMORY_TOOLS
from shared.tools.registry import Tool, ToolContext, ToolError, ToolOutcome, ToolRegistry


def default_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(CURRENT_TIME)
    for tool in MEMORY_TOOLS:
        registry.register(tool)
    return registry


__all__ = ["Tool", "ToolContext", "ToolError", "ToolOutcome", "ToolRegistry", "default_registry"]
