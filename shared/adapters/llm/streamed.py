"""What the SDK-backed providers share: a chat call is one streamed request, retried by the provider's policy
only while nothing of it has reached the caller (a retry after a shown fragment would show the reply's start
twice). Each provider builds its own SDK's client, sends and reads its own stream and builds the result."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from shared.adapters.llm.retry import DEFAULT_RETRY_POLICY, DeltaTracker, RetryPolicy, call_with_retries
from shared.llm.types import ChatRequest, ChatResult, DeltaCallback

Streamed = TypeVar("Streamed")


class StreamedProvider(Generic[Streamed]):
    name: str

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 120.0,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
    ) -> None:
        # The SDK's own retries are off so `retry` is the only policy; only the arguments configure the client,
        # never the SDK's environment variables (see shared/adapters/sdk_clients.py).
        self.client = self._client(api_key=api_key, base_url=base_url, timeout=timeout)
        self.retry = retry

    def chat(self, request: ChatRequest, on_delta: DeltaCallback | None = None) -> ChatResult:
        tracker = DeltaTracker(on_delta)
        streamed = call_with_retries(
            lambda: self._stream_once(request, tracker),
            provider=self.name,
            policy=self.retry,
            replay_safe=lambda: not tracker.delivered,
        )
        return self._result(streamed, request)

    def _client(self, *, api_key: str | None, base_url: str | None, timeout: float) -> Any:
        raise NotImplementedError

    def _stream_once(self, request: ChatRequest, on_text: DeltaTracker) -> Streamed:
        """One request, its text fragments passed to `on_text` as they come; what the stream left."""
        raise NotImplementedError

    def _result(self, streamed: Streamed, request: ChatRequest) -> ChatResult:
        raise NotImplementedError
