"""Provider-neutral shapes for a chat request and its result.

Every provider (Anthropic, OpenAI-compatible, offline) takes a `ChatRequest` and returns a
`ChatResult`; the agent loop never sees a provider's own wire types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    """One message of the conversation as the model sees it.

    - user: `content` is the user's text.
    - assistant: `content` is the text (may be empty) and `tool_calls` the calls it made.
    - tool: `content` is the tool's output for `tool_call_id`.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


@dataclass(frozen=True)
class ChatRequest:
    """What is sent to the model for one iteration, in the order a prompt cache wants it: tools, then
    `system_static` (stable across turns), then `messages` (the history, append-only), then
    `dynamic_tail` (rebuilt every iteration: date and time, relevant memories, summary, steering), which
    providers send after the last message as its final, uncached part (shared/adapters/llm/anthropic_layout.py
    and openai_layout.py).
    """

    model: str
    messages: tuple[ChatMessage, ...]
    system_static: str = ""
    dynamic_tail: str = ""
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 1024
    temperature: float | None = None


@dataclass
class Usage:
    """Token counts of one or more requests.

    `input_tokens` counts uncached input only; cached reads and cache writes are separate, so the
    total prompt size is input + cache_read + cache_write.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass
class ChatResult:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    provider: str = ""


# Called with each text fragment as the model produces it.
DeltaCallback = Callable[[str], None]


class LLMError(Exception):
    """A provider failed in a way retries did not fix; the message is safe to show a user."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ChatProvider(Protocol):
    name: str

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult: ...
