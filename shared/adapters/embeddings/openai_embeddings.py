"""OpenAI's embeddings endpoint, or any server that speaks it (Ollama, vLLM, TEI).

Retries: the SDK is built with `max_retries=0` so this module alone decides. Rate limits (429), server
errors (5xx), timeouts and connection failures are tried 3 times in all, waiting 0.5 s then 2 s (×4 per
step, capped at 8 s), or what the server's Retry-After asks for (also capped). Any other 4xx is a
configuration problem (bad key, unknown model, unsupported `dimensions`) and raises `EmbeddingError` at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from shared.adapters.llm.retry import (
    SDK_ERRORS,
    RetryPolicy,
    effective_status,
    is_retryable,
    retry_after_seconds,
    to_llm_error,
)
from shared.adapters.sdk_clients import openai_client
from shared.embeddings.base import EmbeddingError

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
DEFAULT_TIMEOUT_SECONDS = 60.0

# Native output sizes of models whose dimension is known without asking the server. Any other model
# (typically on an OpenAI-compatible server: Ollama, vLLM, TEI) is probed with one text on first use.
KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
PROBE_TEXT = "dimension probe"


# Same policy type as the chat providers (its `sleep` is injectable so tests record waits instead of
# sleeping); waits grow ×4 per attempt: 0.5 s, 2 s, 8 s (the cap).
DEFAULT_EMBEDDING_RETRY = RetryPolicy(attempts=3, base_wait=0.5, max_wait=8.0)
_BACKOFF_GROWTH = 4.0


class OpenAIEmbedder:
    provider = "openai"

    def __init__(
        self,
        *,
        model: str = DEFAULT_OPENAI_MODEL,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy = DEFAULT_EMBEDDING_RETRY,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # Only the arguments configure the client, never OPENAI_* variables (see shared/adapters/sdk_clients.py).
        self.client = openai_client(api_key=api_key, base_url=base_url, timeout=timeout)
        self.model = model
        self.dimensions = dimensions  # the `dimensions` request parameter; None = the model's native size
        self.batch_size = batch_size
        self.retry = retry
        self._dimension: int | None = dimensions or KNOWN_DIMENSIONS.get(model)
        self._probe_lock = threading.Lock()

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            with self._probe_lock:
                if self._dimension is None:
                    # An unknown model's size can only be learned by asking; one short text is enough.
                    self._dimension = len(self._request([PROBE_TEXT])[0])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors = self._request(texts[start : start + self.batch_size])
            expected = self.dimension
            for vector in vectors:
                # A server that ignores `dimensions` (or changed models) would otherwise fail later, in
                # Postgres, with a less helpful error about the column type.
                if len(vector) != expected:
                    raise EmbeddingError(
                        f"{self.model} returned {len(vector)}-dimensional vectors, expected {expected}"
                    )
            out.extend(vectors)
        return out

    def _request(self, texts: Sequence[str]) -> list[list[float]]:
        attempts_made = 0

        def attempt() -> list[list[float]]:
            nonlocal attempts_made
            attempts_made += 1
            response = self.client.embeddings.create(
                model=self.model,
                input=list(texts),
                dimensions=self.dimensions if self.dimensions is not None else openai.omit,
                # Without it the SDK asks for base64, which several compatible servers do not implement.
                encoding_format="float",
            )
            if len(response.data) != len(texts):
                raise EmbeddingError(f"{self.model} returned {len(response.data)} vectors for {len(texts)} texts")
            return [item.embedding for item in sorted(response.data, key=lambda item: item.index)]

        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=self._wait,
            retry=retry_if_exception(is_retryable),
            sleep=self.retry.sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except SDK_ERRORS as exc:
            # Reuse the chat providers' wording ("openai returned 400 invalid_request_error: …").
            described = to_llm_error(exc, provider=f"embeddings ({self.model})", attempts=attempts_made)
            raise EmbeddingError(str(described), status=effective_status(exc), retryable=described.retryable) from exc

    def _wait(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        hinted = retry_after_seconds(_headers_of(exc))
        if hinted is not None:
            return min(hinted, self.retry.max_wait)
        step = retry_state.attempt_number - 1  # attempt_number counts the call that just failed
        return min(self.retry.base_wait * _BACKOFF_GROWTH**step, self.retry.max_wait)


def _headers_of(exc: BaseException | None) -> Any:
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None)
