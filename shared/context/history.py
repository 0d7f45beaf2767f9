"""What a turn reads before the model runs: the session's live messages and relevant memories."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from shared.context.dynamic import RELEVANT_LIMIT
from shared.infra.db import Conn, Query
from shared.llm.types import ChatMessage, ToolCall
from shared.memory.rows import MemoryLine
from shared.text import estimate_tokens
from shared.turns.rows import ContextMessage, SessionRow, TurnRef

if TYPE_CHECKING:
    from shared.memory.search_reads import SearchReads

UNANSWERED_CALL = "error: no result: the calling application did not run this tool and went on"


def load_context(conn: Conn, turn: TurnRef) -> list[ChatMessage]:
    """The session's live (not compacted) messages up to and including this turn."""
    return _messages(cast("list[ContextMessage]", conn.execute(*_context_query(turn)).fetchall()))


def turn_start_queries(turn: TurnRef) -> dict[str, Query]:
    """The reads `turn_start` takes: to be sent together with the prompt's (`context_queries`)."""
    return {"history": _context_query(turn), "session": ("SELECT * FROM sessions WHERE id = %s", (turn["session_id"],))}


def turn_start(rows: Mapping[str, list[dict[str, Any]]]) -> tuple[list[ChatMessage], SessionRow]:
    """The turn's history (as `load_context` reads it) and its session row, from `turn_start_queries`' rows."""
    assert rows["session"]  # the turn's session: a turn row references it
    return _messages(cast("list[ContextMessage]", rows["history"])), cast("SessionRow", rows["session"][0])


def _context_query(turn: TurnRef) -> Query:
    return (
        """SELECT role, content, tool_calls, tool_results, name FROM session_messages
           WHERE session_id = %s AND NOT is_compacted AND (turn_id IS NULL OR turn_id <= %s)
             AND role IN ('user', 'assistant', 'tool')
           ORDER BY turn_id NULLS FIRST, id""",
        (turn["session_id"], turn["id"]),
    )


def _messages(rows: list[ContextMessage]) -> list[ChatMessage]:
    return answer_unanswered_calls([row_to_message(row) for row in rows])


def answer_unanswered_calls(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A call of a caller's own tool whose result never came (the caller sent a new message instead)
    gets an error result: providers refuse a tool call that is not followed by its result."""
    out: list[ChatMessage] = []
    pending: list[ToolCall] = []
    for message in messages:
        if message.role == "tool":
            pending = [call for call in pending if call.id != message.tool_call_id]
        elif pending:
            out.extend(
                ChatMessage("tool", UNANSWERED_CALL, tool_call_id=call.id, tool_name=call.name, is_error=True)
                for call in pending
            )
            pending = []
        out.append(message)
        if message.role == "assistant" and message.tool_calls:
            pending = list(message.tool_calls)
    return out


def row_to_message(row: Mapping[str, Any]) -> ChatMessage:
    """A message with ContextMessage's columns (a history row, or a message of the REST transcript as a client
    reads it back) as the model is given it."""
    if row["role"] == "assistant":
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in row["tool_calls"] or [])
        return ChatMessage("assistant", row["content"], tool_calls=calls)
    if row["role"] == "tool":
        meta = row["tool_results"] or {}
        if not meta.get("tool_call_id"):
            # An ingested tool message (an outside agent's tool output) answers no call of ours, and
            # providers refuse a tool result without its call: it travels as text instead.
            return ChatMessage("user", f"[{meta.get('name') or row.get('name') or 'tool'} result]\n{row['content']}")
        return ChatMessage(
            "tool",
            row["content"],
            tool_call_id=meta.get("tool_call_id"),
            tool_name=meta.get("name"),
            is_error=bool(meta.get("is_error")),
        )
    return ChatMessage("user", row["content"])


def relevant_memories(
    conn: Conn,
    turn: TurnRef,
    history: list[ChatMessage],
    prior: SearchReads | None = None,
    max_tokens: int | None = None,
) -> list[MemoryLine]:
    """Facts and excerpts of the user's other conversations that bear on the latest user message, best first,
    within `max_tokens` (default ENGRAM_TURN_RECALL_TOKENS; shown, not counted as use: counting them would churn
    the "What You Know" selection every turn). An excerpt is listed under its day and conversation with its
    speaker, as `{"namespace": "8 May 2023, conversation chat-1", "key": "Melanie", "value": "…"}`; a fact as
    stored. `prior`: what the search reads first (search_reads.py), read along with the turn's other reads;
    None = read it here."""
    latest = next((m.content for m in reversed(history) if m.role == "user"), "")
    if not latest.strip():
        return []
    from shared.context.packed import excerpt_place
    from shared.infra.config import get_settings
    from shared.memory.search import SearchFilters
    from shared.memory.service import search_memories
    from shared.memory.store import Scope

    budget = get_settings().turn_recall_tokens if max_tokens is None else max_tokens
    results = search_memories(
        conn,
        Scope(turn["tenant_id"], turn["user_id"]),
        latest[:2000],
        limit=max(RELEVANT_LIMIT, budget // 25),
        filters=SearchFilters(exclude_session_id=turn["session_id"]),
        prior=prior,
    )
    chosen: list[MemoryLine] = []
    used = 0
    for r in results:
        item: MemoryLine
        if r.source == "transcript":
            item = {
                "namespace": excerpt_place(r.created_at, r.session_key),
                "key": r.speaker or "someone",
                "value": r.value,
            }
        else:
            item = {"namespace": r.namespace, "key": r.key, "value": r.value}
        cost = estimate_tokens(f"- [{item['namespace']}] {item['key']}: {item['value']}")
        if used + cost > budget:
            continue
        chosen.append(item)
        used += cost
    return chosen
