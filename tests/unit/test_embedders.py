"""Embedders: OpenAIEmbedder through the real SDK against the fake server, LocalEmbedder with the real model."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import SecretStr

from ops.embedded import free_port
from ops.fake_llm import FakeLLM, FakeReply, fake_embedding
from shared.adapters.embeddings.openai_embeddings import PROBE_TEXT
from shared.adapters.llm.retry import RetryPolicy
from shared.embeddings.providers import (
    LOCAL_DIMENSION,
    EmbeddingError,
    LocalEmbedder,
    OnnxLocalEmbedder,
    OpenAIEmbedder,
    embedder_from_settings,
    local_model,
)
from shared.infra.config import Settings


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLM) -> FakeLLM:
    server.reset()
    return server


@pytest.fixture
def waits() -> list[float]:
    """Waits the retry policy asked for; recorded instead of slept so tests are fast and exact."""
    return []


def _openai(fake: FakeLLM, waits: list[float], **kwargs: Any) -> OpenAIEmbedder:
    # The production policy's numbers (3 attempts, 0.5 s ×4, capped at 8 s), minus the sleeping.
    policy = RetryPolicy(attempts=3, base_wait=0.5, max_wait=8.0, sleep=waits.append)
    return OpenAIEmbedder(api_key="test-key", base_url=fake.openai_base_url, retry=policy, **kwargs)


def _embedding_requests(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.path == "/v1/embeddings"]


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (_norm(a) * _norm(b))


# --- OpenAI-compatible ---------------------------------------------------------------------------------


def test_sends_dimensions_and_batches_requests(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="text-embedding-3-small", dimensions=32, batch_size=2)
    texts = ["one fish", "two fish", "red fish", "blue fish", "old fish"]

    vectors = embedder.embed(texts)

    assert embedder.dimension == 32
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(fake_embedding(text, 32))
    bodies = _embedding_requests(fake)
    assert [b["input"] for b in bodies] == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(b["dimensions"] == 32 and b["model"] == "text-embedding-3-small" for b in bodies)
    assert all(b["encoding_format"] == "float" for b in bodies)
    assert all(_norm(v) == pytest.approx(1.0) for v in vectors)
    assert waits == []


def test_known_model_needs_no_probe_and_omits_dimensions(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="text-embedding-3-small")

    assert embedder.dimension == 1536
    assert _embedding_requests(fake) == []
    assert len(embedder.embed(["hello"])[0]) == 1536
    assert "dimensions" not in _embedding_requests(fake)[0]


def test_unknown_model_dimension_is_probed_once(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="nomic-embed-text")

    assert embedder.dimension == 64  # the fake's native size for models it does not know
    assert embedder.dimension == 64
    assert embedder.embed([]) == []
    assert [b["input"] for b in _embedding_requests(fake)] == [[PROBE_TEXT]]


def test_retries_429_honouring_retry_after_then_succeeds(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="m", dimensions=8)
    fake.script_embeddings(FakeReply(status=429, headers={"retry-after": "0.25"}))

    assert embedder.embed(["a dog"])[0] == pytest.approx(fake_embedding("a dog", 8))
    assert waits == [0.25]
    assert len(_embedding_requests(fake)) == 2


def test_backoff_grows_and_gives_up_after_three_attempts(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="m", dimensions=8)
    fake.script_embeddings(FakeReply(status=503), FakeReply(status=500), FakeReply(status=502))

    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["a dog"])

    assert waits == [0.5, 2.0]
    assert caught.value.status == 502
    assert caught.value.retryable
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(_embedding_requests(fake)) == 3


def test_retry_after_is_capped(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="m", dimensions=8)
    fake.script_embeddings(FakeReply(status=429, headers={"retry-after": "120"}))

    embedder.embed(["a dog"])

    assert waits == [8.0]


def test_400_fails_at_once_with_status(fake: FakeLLM, waits: list[float]) -> None:
    embedder = _openai(fake, waits, model="m", dimensions=8)
    fake.script_embeddings(FakeReply(status=400))

    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["a dog"])

    assert caught.value.status == 400
    assert not caught.value.retryable
    assert "400" in str(caught.value) and "invalid_request_error" in str(caught.value)
    assert waits == []
    assert len(_embedding_requests(fake)) == 1


def test_connection_errors_are_retried(waits: list[float]) -> None:
    policy = RetryPolicy(attempts=3, base_wait=0.5, max_wait=8.0, sleep=waits.append)
    embedder = OpenAIEmbedder(
        api_key="k", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", dimensions=8, retry=policy
    )

    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["a dog"])

    assert waits == [0.5, 2.0]
    assert caught.value.retryable and caught.value.status is None
    assert "connection failed" in str(caught.value)


def test_fake_answers_base64_like_the_sdk_default(fake: FakeLLM, waits: list[float]) -> None:
    # The SDK asks for base64 unless told otherwise; the fake must decode to the same vectors.
    embedder = _openai(fake, waits, model="m", dimensions=16)
    response = embedder.client.embeddings.create(model="m", input=["a cat"], dimensions=16)
    assert response.data[0].embedding == pytest.approx(fake_embedding("a cat", 16), abs=1e-6)
    assert response.usage.total_tokens > 0


def test_chat_script_is_not_consumed_by_embeddings(fake: FakeLLM, waits: list[float]) -> None:
    fake.script(FakeReply(status=500))
    embedder = _openai(fake, waits, model="m", dimensions=8)
    embedder.embed(["x"])
    # The scripted chat failure is still queued, for the next chat request.
    with pytest.raises(openai.InternalServerError):
        embedder.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_embedder_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEY", "BASE_URL", "MODEL", "DIMENSIONS", "PROVIDER"):
        monkeypatch.delenv(f"ENGRAM_EMBEDDING_{name}", raising=False)
        monkeypatch.delenv(f"ENGRAM_OPENAI_{name}", raising=False)
    local = embedder_from_settings(Settings(_env_file=None, embedding_provider="local"))
    assert isinstance(local, OnnxLocalEmbedder)  # the default backend: int8 for a new database
    assert (local.provider, local.model, local.dimension) == ("local", "all-MiniLM-L6-v2-int8", 384)
    torch = embedder_from_settings(Settings(_env_file=None, embedding_provider="local", embedding_backend="torch"))
    assert isinstance(torch, LocalEmbedder)
    assert (torch.provider, torch.model, torch.dimension) == ("local", "all-MiniLM-L6-v2", 384)

    settings = Settings(
        _env_file=None,
        embedding_provider="openai",
        openai_api_key=SecretStr("chat-key"),
        openai_base_url="http://chat.invalid/v1",
        embedding_dimensions=256,
        embedding_batch_size=7,
    )
    remote = embedder_from_settings(settings)
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.model, remote.dimension, remote.batch_size) == ("text-embedding-3-small", 256, 7)
    assert remote.client.api_key == "chat-key"  # falls back to the chat provider's key and URL
    assert str(remote.client.base_url).startswith("http://chat.invalid/v1")

    settings.embedding_api_key = SecretStr("embed-key")
    settings.embedding_base_url = "http://embed.invalid/v1"
    settings.embedding_model = "nomic-embed-text"
    remote = embedder_from_settings(settings)
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.client.api_key == "embed-key"
    assert str(remote.client.base_url).startswith("http://embed.invalid/v1")

    with pytest.raises(EmbeddingError, match="only has all-MiniLM-L6-v2"):
        embedder_from_settings(Settings(_env_file=None, embedding_model="bge-small"))


# --- local MiniLM ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])  # load the model once for the module
    return embedder


def test_local_vectors_are_normalised_and_semantic(local: LocalEmbedder) -> None:
    dogs, puppies, taxes = local.embed(["I love dogs", "I adore puppies", "quarterly tax filing"])

    assert len(dogs) == len(puppies) == len(taxes) == LOCAL_DIMENSION == local.dimension
    assert all(_norm(v) == pytest.approx(1.0, abs=1e-5) for v in (dogs, puppies, taxes))
    assert _cosine(dogs, puppies) > _cosine(dogs, taxes) + 0.2
    assert local.embed([]) == []


def test_local_model_is_shared_and_safe_across_threads(local: LocalEmbedder) -> None:
    models: list[object] = []
    vectors: list[list[float]] = []

    def work() -> None:
        models.append(local_model())
        vectors.extend(LocalEmbedder().embed(["I love dogs", "and cats"]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(models) == 4 and all(model is models[0] for model in models)
    assert len(vectors) == 8
    assert LocalEmbedder().embed(["I love dogs"])[0] == pytest.approx(local.embed(["I love dogs"])[0], abs=1e-6)
