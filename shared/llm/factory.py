"""Choosing the chat provider and models from settings.

`auto` (the default) picks Anthropic when an Anthropic key is set, then OpenAI when an OpenAI key
or an OpenAI-compatible base URL is set, and otherwise the offline rules provider.
"""

from __future__ import annotations

from shared.adapters.llm.retry import RetryPolicy
from shared.infra.config import Settings
from shared.llm.offline import OfflineProvider
from shared.llm.types import ChatProvider

DEFAULT_MODELS = {
    "anthropic": ("claude-sonnet-4-6", "claude-haiku-4-5"),
    "openai": ("gpt-4.1", "gpt-4.1-mini"),
    "offline": ("offline-rules", "offline-rules"),
}


def provider_name(settings: Settings) -> str:
    if settings.llm_provider != "auto":
        return settings.llm_provider
    if settings.anthropic_api_key:
        return "anthropic"
    if settings.openai_api_key or settings.openai_base_url:
        return "openai"
    return "offline"


def chat_model(settings: Settings) -> str:
    return settings.llm_model or DEFAULT_MODELS[provider_name(settings)][0]


def cheap_model(settings: Settings) -> str:
    return settings.llm_cheap_model or DEFAULT_MODELS[provider_name(settings)][1]


def chat_provider(settings: Settings) -> ChatProvider:
    name = provider_name(settings)
    retry = RetryPolicy(attempts=settings.llm_max_attempts, max_wait=settings.llm_max_retry_wait_seconds)
    if name == "anthropic":
        from shared.adapters.llm.anthropic_provider import AnthropicProvider

        key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
        return AnthropicProvider(
            api_key=key, base_url=settings.anthropic_base_url, timeout=settings.llm_timeout_seconds, retry=retry
        )
    if name == "openai":
        from shared.adapters.llm.openai_provider import OpenAIProvider

        # No key: local OpenAI-compatible servers (Ollama, vLLM) accept the placeholder key
        # shared/adapters/sdk_clients.py sends.
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        return OpenAIProvider(
            api_key=key, base_url=settings.openai_base_url, timeout=settings.llm_timeout_seconds, retry=retry
        )
    return OfflineProvider()


def provider_problems(settings: Settings) -> list[str]:
    """Configuration mistakes `engram doctor` reports, each with the fix."""
    problems = []
    if settings.llm_provider == "anthropic" and not settings.anthropic_api_key:
        problems.append("ENGRAM_LLM_PROVIDER=anthropic but ENGRAM_ANTHROPIC_API_KEY is not set: set the key")
    if settings.llm_provider == "openai" and not (settings.openai_api_key or settings.openai_base_url):
        problems.append(
            "ENGRAM_LLM_PROVIDER=openai but neither ENGRAM_OPENAI_API_KEY nor ENGRAM_OPENAI_BASE_URL is set: "
            "set the key (OpenAI) or the base URL of a compatible server, e.g. http://127.0.0.1:11434/v1 (Ollama)"
        )
    return problems
