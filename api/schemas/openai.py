"""Bodies of the OpenAI-compatible API (`/v1/chat/completions`, `/v1/models`).

Requests take what the official `openai` SDK sends; fields engram does not use (top_p, stop,
response_format, ...) are accepted and ignored, so clients need no changes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas.common import ID_PATTERN, SpeakerName
from shared.text import SafeText
from shared.turns.openai_compat import ClientCall, ClientMessage, CompletionRefused

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_TOOLS = 128


class _Lenient(BaseModel):
    # Fields engram does not use are ignored (the module docstring); those it uses are strict, as on every
    # request body (api.schemas.common.RequestBody): `"stream": "false"` is refused, not read as true.
    model_config = ConfigDict(extra="ignore", strict=True)


class TextPart(_Lenient):
    type: str
    text: SafeText | None = None


class FunctionCallIn(_Lenient):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    arguments: str = Field("{}", description="JSON text of the arguments")


class ToolCallIn(_Lenient):
    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCallIn


class MessageIn(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: SafeText | list[TextPart] | None = None
    name: SpeakerName | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(None, max_length=200)

    def text(self, index: int) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise CompletionRefused(
                    f"messages[{index}]: only text content is supported (got a {part.type!r} part)",
                    f"messages[{index}].content",
                )
            texts.append(part.text)
        return "".join(texts)

    def to_client(self, index: int) -> ClientMessage:
        role = self.role
        if role == "tool" and not self.tool_call_id:
            raise CompletionRefused(
                f"messages[{index}]: a tool message needs tool_call_id", f"messages[{index}].tool_call_id"
            )
        if role == "user" and not self.text(index).strip():
            # As on every other door (REST turns, ingest, channels): a message of nothing is refused.
            raise CompletionRefused(
                f"messages[{index}]: a user message needs text (it is empty, or only invisible characters)",
                f"messages[{index}].content",
            )
        calls = tuple(
            ClientCall(call.id, call.function.name, _arguments(call.function.arguments, index))
            for call in self.tool_calls or ()
        )
        speaker = self.name if role in ("user", "assistant") else None
        return ClientMessage(role, self.text(index), calls, self.tool_call_id if role == "tool" else None, speaker)


def _arguments(raw: str, index: int) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise CompletionRefused(
            f"messages[{index}]: tool call arguments are not JSON ({exc.msg})", f"messages[{index}].tool_calls"
        ) from exc
    if not isinstance(parsed, dict):
        raise CompletionRefused(
            f"messages[{index}]: tool call arguments must be a JSON object", f"messages[{index}].tool_calls"
        )
    return parsed


class FunctionIn(_Lenient):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field("", max_length=8000)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolIn(_Lenient):
    type: Literal["function"]
    function: FunctionIn


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionIn(_Lenient):
    model: str = Field(min_length=1, max_length=200, description="Any name: it names the default session")
    messages: list[MessageIn] = Field(min_length=1)
    user: str | None = Field(
        None, pattern=ID_PATTERN, description="The engram user (required unless the key is bound to one)"
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolIn] | None = Field(None, max_length=MAX_TOOLS)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    n: int = Field(1, ge=1, le=1, description="Only one choice is generated")

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[ToolIn] | None) -> list[ToolIn] | None:
        names = [tool.function.name for tool in tools or ()]
        if len(set(names)) != len(names):
            raise ValueError("two tools share a name")
        return tools


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "engram"


class ModelsOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    """The body of every error of the OpenAI-compatible routes (OpenAI's own shape)."""

    error: OpenAIErrorBody
