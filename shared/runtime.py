"""Builds the long-lived collaborators of a worker process from settings, once per process."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from shared.agent import TurnDeps
from shared.infra.config import get_settings
from shared.infra.redis_client import get_redis
from shared.llm.factory import chat_model, chat_provider
from shared.tools import default_registry
from shared.turns.rows import SessionRow


@lru_cache(maxsize=1)
def turn_deps(
    memory_written: Callable[[int], None] | None = None,
    after_turn: Callable[[int, int, SessionRow | None], None] | None = None,
    reply_ready: Callable[[int], None] | None = None,
) -> TurnDeps:
    settings = get_settings()
    return TurnDeps(
        provider=chat_provider(settings),
        model=chat_model(settings),
        tools=default_registry(),
        redis=get_redis(),
        max_iterations=settings.max_iterations,
        max_output_tokens=settings.max_output_tokens,
        lock_ttl_seconds=settings.session_lock_ttl_seconds,
        memory_written=memory_written,
        after_turn=after_turn,
        reply_ready=reply_ready,
        context_dir=settings.context_dir,
        context_window=settings.context_window_tokens,
        epoch_max_delta=settings.prompt_epoch_max_delta,
    )
