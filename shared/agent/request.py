"""One model call's provider-neutral request, from the compiled context (shared/context/compiler.py).

The wire layout per provider — where the cache breakpoints go and where the tail is put — is in
shared/adapters/llm/anthropic_layout.py and shared/adapters/llm/openai_layout.py.
"""

from __future__ import annotations

from shared.context.compiler import CompiledRequest
from shared.llm.types import ChatRequest, ToolSpec
from shared.turns.client_options import ClientOptions


def chat_request(
    compiled: CompiledRequest,
    *,
    model: str,
    tools: tuple[ToolSpec, ...],
    max_output_tokens: int,
    client: ClientOptions | None,
) -> ChatRequest:
    """`tools` empty on the last allowed call (the model has to answer in words). The caller's own
    instructions (OpenAI-compatible route) ride in the tail: they may change from request to request."""
    return ChatRequest(
        model=model,
        messages=tuple(compiled.messages),
        system_static=compiled.system_static,
        dynamic_tail=compiled.tail(client.instructions_section() if client else ""),
        tools=tools,
        max_tokens=client.output_tokens(max_output_tokens) if client else max_output_tokens,
        temperature=client.temperature if client else None,
    )
