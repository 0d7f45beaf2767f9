"""The model loop of one turn: call the model, run the tools it asks for, call it again, up to
`max_iterations` calls. Pure of the database: the turn runner (turn_runner.py) reads before and writes
after; each call's request comes from the compiled context (request.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from shared.agent.deps import TurnDeps
from shared.agent.request import chat_request
from shared.context.compiler import IntegrityViolation, TurnContext, compile_request
from shared.context.fences import MarkerFilter, strip_markers
from shared.infra.events import TurnEventPublisher
from shared.llm.ledger import CallRecord, LedgerScope
from shared.llm.types import ChatMessage, ChatResult, LLMError, ToolCall, Usage
from shared.tools import ToolContext
from shared.turns.client_options import ClientOptions, merged_tools

TOOL_EVENT_PREVIEW_CHARS = 500


@dataclass
class TurnOutcome:
    messages: list[ChatMessage]
    reply: str
    usage: Usage
    calls: list[CallRecord]
    llm_seconds: float
    steering_fired: set[str]
    # Calls of the OpenAI-compatible caller's own tools: not run here; they end the turn and go back to it.
    client_calls: list[ToolCall] = field(default_factory=list)


def run_agent_loop(
    history: list[ChatMessage],
    ctx: ToolContext,
    deps: TurnDeps,
    events: TurnEventPublisher,
    tc: TurnContext,
    client: ClientOptions | None = None,
) -> TurnOutcome:
    tool_specs = merged_tools(deps.tools.specs(), client)
    client_tools = client.tool_names if client is not None else frozenset()
    handed_back: list[ToolCall] = []
    produced: list[ChatMessage] = []
    texts: list[str] = []
    usage = Usage()
    llm_seconds = 0.0
    calls: list[CallRecord] = []
    fired: set[str] = set()
    ledger = LedgerScope(ctx.tenant_id, ctx.user_id, ctx.session_id, ctx.turn_id)
    for iteration in range(deps.max_iterations):
        # The last allowed call offers no tools, so the model has to answer in words.
        last = iteration == deps.max_iterations - 1
        compiled = compile_request(
            tc,
            history + produced,
            iteration=iteration,
            now=deps.clock(),
            tools_used_this_turn=any(m.tool_calls for m in produced),
            last_assistant_text=texts[-1] if texts else "",
        )
        if compiled.problems:
            raise IntegrityViolation("integrity check of the system prompt failed: " + "; ".join(compiled.problems))
        fired.update(s.name for s in compiled.steering)
        request = chat_request(
            compiled,
            model=deps.model,
            tools=() if last else tool_specs,
            max_output_tokens=deps.max_output_tokens,
            client=client,
        )
        began = time.monotonic()
        forwarder = DeltaForwarder(events, paragraph_break=bool(texts))
        try:
            result: ChatResult = deps.provider.chat(request, forwarder)
        except LLMError:
            failed = CallRecord("chat", deps.provider.name, deps.model, Usage(), _ms_since(began), ok=False)
            deps.record_call(failed, ledger)
            raise
        forwarder.finish()
        elapsed = time.monotonic() - began
        llm_seconds += elapsed
        record = CallRecord("chat", deps.provider.name, result.model or deps.model, result.usage, int(elapsed * 1000))
        deps.record_call(record, ledger)
        calls.append(record)
        usage.add(result.usage)
        text = strip_markers(result.text)
        if text:
            texts.append(text)
        tool_calls = [] if last else result.tool_calls
        produced.append(ChatMessage("assistant", text, tool_calls=tuple(tool_calls)))
        if not tool_calls:
            break
        for call in tool_calls:
            if call.name in client_tools:
                # The caller's own tool: it runs it, and its next request brings the result.
                events.publish("tool_call", id=call.id, name=call.name, arguments=call.arguments, client=True)
                handed_back.append(call)
                continue
            events.publish("tool_call", id=call.id, name=call.name, arguments=call.arguments)
            outcome = deps.tools.execute(ctx, call.name, call.arguments)
            events.publish(
                "tool_result",
                id=call.id,
                name=call.name,
                is_error=outcome.is_error,
                content=outcome.content[:TOOL_EVENT_PREVIEW_CHARS],
            )
            produced.append(
                ChatMessage(
                    "tool", outcome.content, tool_call_id=call.id, tool_name=call.name, is_error=outcome.is_error
                )
            )
        if handed_back:
            break
    return TurnOutcome(produced, "\n\n".join(texts), usage, calls, llm_seconds, fired, handed_back)


def _ms_since(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


class DeltaForwarder:
    """Publishes one model call's text fragments with fence markers stripped, so concatenated deltas always
    equal the stored reply: a tail that could still become a marker (split across fragments) is held back
    until it is decided, and `finish` flushes it when the call returns. A later iteration's text starts with
    the paragraph break that joins it to the reply — only once it has text, as the stored reply skips empty
    iterations."""

    def __init__(self, events: TurnEventPublisher, *, paragraph_break: bool) -> None:
        self.events = events
        self.pending_break = paragraph_break
        self.filter = MarkerFilter()

    def __call__(self, fragment: str) -> None:
        self._publish(self.filter.feed(fragment))

    def finish(self) -> None:
        self._publish(self.filter.finish())
        self.events.flush()  # nothing of this call's text waits behind the tools that may run next

    def _publish(self, text: str) -> None:
        if not text:
            return
        if self.pending_break:
            self.events.publish("delta", text="\n\n")
            self.pending_break = False
        self.events.publish("delta", text=text)
