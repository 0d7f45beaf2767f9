"""Only ENGRAM_ settings configure the SDK clients: the SDKs' own environment variables (a user's real
OPENAI_API_KEY above all) must never reach whatever server engram is pointed at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.adapters.sdk_clients import NO_KEY
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import Settings
from shared.llm.factory import chat_provider
from shared.llm.types import ChatMessage, ChatRequest

REAL_KEY = "sk-the-users-real-key"
SDK_ENVIRONMENT = {
    "OPENAI_API_KEY": REAL_KEY,
    "OPENAI_ADMIN_KEY": REAL_KEY + "-admin",
    "OPENAI_ORG_ID": "org-someone",
    "OPENAI_PROJECT_ID": "proj-someone",
    "ANTHROPIC_API_KEY": REAL_KEY,
    "ANTHROPIC_AUTH_TOKEN": REAL_KEY + "-token",
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> FakeLLM:
    server.reset()
    for name, value in SDK_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    # The SDKs' base URL variables point somewhere else entirely; settings must win.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    return server


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def ask(provider_settings: Settings) -> None:
    chat_provider(provider_settings).chat(ChatRequest(model="m", messages=(ChatMessage("user", "hi"),)))


def sent_credentials(fake: FakeLLM) -> list[str]:
    """Every header value of every request the fake received that could carry a credential."""
    return [
        f"{name}: {value}"
        for request in fake.requests
        for name, value in request.headers.items()
        if name.lower() in ("authorization", "x-api-key", "openai-organization", "openai-project")
    ]


def test_openai_compatible_server_without_an_engram_key_never_gets_the_environment_key(fake: FakeLLM) -> None:
    fake.script(FakeReply(text="hello"))
    ask(settings(llm_provider="openai", openai_base_url=fake.openai_base_url))
    assert len(fake.requests) == 1  # ENGRAM_OPENAI_BASE_URL won over OPENAI_BASE_URL
    assert sent_credentials(fake) == [f"authorization: Bearer {NO_KEY}"]


def test_an_engram_key_is_the_one_sent(fake: FakeLLM) -> None:
    fake.script(FakeReply(text="hello"))
    ask(settings(llm_provider="openai", openai_base_url=fake.openai_base_url, openai_api_key="engram-key"))
    assert sent_credentials(fake) == ["authorization: Bearer engram-key"]


def test_anthropic_without_an_engram_key_never_gets_the_environment_key(fake: FakeLLM) -> None:
    fake.script(FakeReply(text="hello"))
    ask(settings(llm_provider="anthropic", anthropic_base_url=fake.anthropic_base_url))
    assert len(fake.requests) == 1 and fake.requests[0].format == "anthropic"
    assert REAL_KEY not in " ".join(sent_credentials(fake))
    assert sent_credentials(fake) and all(NO_KEY in value for value in sent_credentials(fake))


def test_embeddings_endpoint_never_gets_the_environment_key(fake: FakeLLM) -> None:
    embedder = embedder_from_settings(
        settings(embedding_provider="openai", embedding_base_url=fake.openai_base_url, embedding_dimensions=8)
    )
    assert len(embedder.embed(["some text"])[0]) == 8
    assert sent_credentials(fake) == [f"authorization: Bearer {NO_KEY}"]


def test_unset_base_urls_mean_the_vendors_not_the_environment(fake: FakeLLM) -> None:
    openai_provider = chat_provider(settings(llm_provider="openai", openai_api_key="k"))
    anthropic_provider = chat_provider(settings(llm_provider="anthropic", anthropic_api_key="k"))
    assert str(openai_provider.client.base_url).startswith("https://api.openai.com/v1")  # type: ignore[attr-defined]
    assert str(anthropic_provider.client.base_url).startswith("https://api.anthropic.com")  # type: ignore[attr-defined]
    embedder = embedder_from_settings(settings(embedding_provider="openai"))
    assert str(embedder.client.base_url).startswith("https://api.openai.com/v1")  # type: ignore[attr-defined]
