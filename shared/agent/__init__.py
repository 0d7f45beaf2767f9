"""Running chat turns.

- turn_runner.py: one session at a time, turns in order, each exactly once (lock, claim, drain, the
  guarded write of a turn's output);
- model_loop.py: one turn's model calls and tool runs;
- request.py: one model call's request from the compiled context (the wire layout per provider is in
  shared/adapters/llm/anthropic_layout.py and openai_layout.py);
- deps.py: what a turn needs; what it reads first (live messages, relevant memories) is
  shared/context/history.py.
"""

from shared.agent.deps import TurnDeps
from shared.agent.model_loop import TurnOutcome, run_agent_loop
from shared.agent.turn_runner import (
    MAX_TURN_ATTEMPTS,
    DrainOutcome,
    LockLost,
    claim_next_turn,
    drain_session,
    has_open_turns,
    run_claimed_turn,
    sessions_with_running_turns,
)
from shared.context.history import (
    UNANSWERED_CALL,
    answer_unanswered_calls,
    load_context,
    relevant_memories,
    row_to_message,
    turn_start,
    turn_start_queries,
)

__all__ = [
    "MAX_TURN_ATTEMPTS",
    "UNANSWERED_CALL",
    "DrainOutcome",
    "LockLost",
    "TurnDeps",
    "TurnOutcome",
    "answer_unanswered_calls",
    "claim_next_turn",
    "drain_session",
    "has_open_turns",
    "load_context",
    "relevant_memories",
    "row_to_message",
    "run_agent_loop",
    "run_claimed_turn",
    "sessions_with_running_turns",
    "turn_start",
    "turn_start_queries",
]
