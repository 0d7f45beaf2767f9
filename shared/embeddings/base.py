"""What every embedder shares: the protocol, the error callers catch, and the bundled model's identity."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

LOCAL_MODEL = "all-MiniLM-L6-v2"
# The same model with int8 weights (ENGRAM_EMBEDDING_BACKEND=onnx-int8): its vectors differ from the fp32
# model's (cosine ~0.99, not 1e-6), so it is its own embedding space and switching to or from it reindexes.
LOCAL_INT8_MODEL = f"{LOCAL_MODEL}-int8"
LOCAL_DIMENSION = 384


class EmbeddingError(RuntimeError):
    """Embedding failed in a way retries did not fix; the message is safe to show a user."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class Embedder(Protocol):
    """Turns texts into vectors of `dimension` floats, in input order.

    Members are read-only properties so that implementations may compute them lazily (an
    OpenAI-compatible model's dimension is only known after a probe); plain attributes satisfy them too.
    """

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


# One encode at a time per process, whichever local backend runs it: the fast tokenizer is not safe to
# share between threads ("Already borrowed").
encode_lock = threading.Lock()
