"""What a turn needs from its worker process (model, tools, Redis, hooks) — built once per process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import redis

from shared.llm.ledger import CallRecord, LedgerScope, record_call
from shared.llm.types import ChatProvider
from shared.tools import ToolRegistry
from shared.turns.rows import SessionRow


@dataclass
class TurnDeps:
    provider: ChatProvider
    model: str
    tools: ToolRegistry
    redis: redis.Redis
    max_iterations: int = 8
    max_output_tokens: int = 1024
    lock_ttl_seconds: float = 30
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    memory_written: Callable[[int], None] | None = None  # enqueues embedding of memories tools wrote
    # (session_id, turn_id, session row as the turn committed it): schedules memory work
    after_turn: Callable[[int, int, SessionRow | None], None] | None = None
    relevant_memory: bool = True  # search other sessions for the dynamic suffix
    context_dir: Path | None = None
    context_window: int | None = None
    # Each LLM call is written to the ledger the moment it returns, in its own transaction (ledger.py).
    record_call: Callable[[CallRecord, LedgerScope], None] = record_call
    # (delivery_id): a channel turn finished; its reply (or failure notice) is ready to post.
    reply_ready: Callable[[int], None] | None = None
    # New tacit memories shown in the dynamic tail before "What You Know" is rebuilt (context/epoch.py).
    epoch_max_delta: int = 10
