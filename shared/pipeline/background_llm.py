"""LLM calls of background work: the cheapest configured model first, the chat model if it fails.

Every call (failed ones too) is written to the ledger with its purpose as soon as it returns, so a
job that later loses a race or fails still counts what it spent."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from shared.infra.config import Settings
from shared.llm.factory import chat_model, chat_provider, cheap_model
from shared.llm.ledger import CallRecord, LedgerScope, Purpose, record_call
from shared.llm.types import ChatProvider, ChatRequest, LLMError, Usage


@dataclass
class BackgroundResult:
    text: str
    calls: list[CallRecord] = field(default_factory=list)


def complete(
    settings: Settings,
    purpose: Purpose,
    system: str,
    user: str,
    *,
    ledger: LedgerScope,
    max_tokens: int = 1500,
    provider: ChatProvider | None = None,
) -> BackgroundResult:
    """One completion for background work; raises LLMError only when every model failed."""
    provider = provider or chat_provider(settings)
    models = list(dict.fromkeys([cheap_model(settings), chat_model(settings)]))
    calls: list[CallRecord] = []
    error: LLMError | None = None
    for model in models:
        began = time.monotonic()
        # The fixed instructions are the static prompt, which the provider caches; what differs per call is
        # the dynamic tail, sent uncached: as a message it would carry the history's cache breakpoint and be
        # written to the cache (billed above plain input) by a call that never reads it back.
        request = ChatRequest(
            model=model,
            messages=(),
            system_static=system,
            dynamic_tail=user,
            max_tokens=max_tokens,
            temperature=0.0,
        )
        try:
            result = provider.chat(request)
        except LLMError as exc:
            elapsed_ms = int((time.monotonic() - began) * 1000)
            failed = CallRecord(purpose, provider.name, model, Usage(), elapsed_ms, ok=False)
            record_call(failed, ledger)
            calls.append(failed)
            error = exc
            continue
        done = CallRecord(
            purpose, provider.name, result.model or model, result.usage, int((time.monotonic() - began) * 1000)
        )
        record_call(done, ledger)
        calls.append(done)
        return BackgroundResult(result.text, calls)
    assert error is not None
    raise error
