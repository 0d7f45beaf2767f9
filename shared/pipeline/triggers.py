"""When a session's memory jobs are due after a turn: the compaction threshold, and a flush once per compaction
cycle below it (shared.pipeline.jobs runs them; workers.dispatch and the session status ask)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.context.compiler import context_window
from shared.infra.config import Settings
from shared.llm.factory import chat_model
from shared.turns.rows import SessionRow

COMPACTION_SHARE_OF_WINDOW = 0.6


def compaction_threshold(settings: Settings) -> int:
    if settings.compaction_threshold_tokens:
        return settings.compaction_threshold_tokens
    return int(context_window(chat_model(settings), settings.context_window_tokens) * COMPACTION_SHARE_OF_WINDOW)


def flush_needed(session: SessionRow) -> bool:
    """Once per compaction cycle: the cycle's number is compaction_count."""
    return bool(session["memory_flush_compaction_count"] < session["compaction_count"])


@dataclass(frozen=True)
class AfterTurnPlan:
    flush: bool
    compact: bool


def plan_after_turn(session: SessionRow, settings: Settings) -> AfterTurnPlan:
    threshold = compaction_threshold(settings)
    tokens = session["token_count"]
    compact = tokens >= threshold
    # Compaction mines everything first, so a flush is only scheduled below the threshold.
    flush = not compact and tokens >= settings.flush_ratio * threshold and flush_needed(session)
    return AfterTurnPlan(flush=flush, compact=compact)
