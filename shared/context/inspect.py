"""What the model would see on the session's next request, for people (API and CLI)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared.context.compiler import compile_request, describe, prepare_turn
from shared.context.history import load_context, relevant_memories
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.llm.factory import chat_model, provider_name
from shared.tools import default_registry
from shared.turns.accept import find_session, find_user_id
from shared.turns.rows import TurnRef


def _unstarted_session(conn: Conn, tenant_id: int, user_external_id: str) -> dict[str, Any]:
    """A stand-in for a session nobody has written to yet, so the view shows what its first request would
    carry (the user's profile and memories, if the user exists). Nothing is written: looking must not
    create users or sessions. Its fence markers come from a throwaway seed (the real session gets its own)."""
    user_id = find_user_id(conn, tenant_id, user_external_id)
    return {
        "id": 0,  # no row has it: no messages, no turns
        "tenant_id": tenant_id,
        "user_id": user_id or 0,
        "channel": "api",
        "fence_seed": secrets.token_hex(16),
        "active_task": None,
        "summary": None,
        "recovery_pending": False,
        "budget_warned_at": None,
    }


def inspect_session(
    conn: Conn, settings: Settings, *, tenant_id: int, user_external_id: str, session_key: str
) -> dict[str, Any]:
    """The view of the session's next request; for a session that does not exist yet, of its first one
    (`session_exists` false; the user's message is not known yet, so there are no messages)."""
    found = find_session(conn, tenant_id, user_external_id, session_key)
    exists = found is not None
    session: Mapping[str, Any] = found if found is not None else _unstarted_session(conn, tenant_id, user_external_id)
    last_turn = conn.execute("SELECT max(id) AS id FROM turns WHERE session_id = %s", (session["id"],)).fetchone()
    pseudo_turn: TurnRef = {
        "id": (last_turn or {}).get("id") or 0,
        "session_id": session["id"],
        "tenant_id": tenant_id,
        "user_id": session["user_id"],
    }
    history = load_context(conn, pseudo_turn)
    now = datetime.now(UTC)
    model, provider = chat_model(settings), provider_name(settings)
    tc = prepare_turn(
        conn,
        session=session,
        user_timezone=None,
        turn_id=None,
        tools=default_registry().specs(),
        provider=provider,
        model=model,
        now=now,
        context_dir=settings.context_dir,
        relevant=relevant_memories(conn, pseudo_turn, history),
        context_window_override=settings.context_window_tokens,
        max_output_tokens=settings.max_output_tokens,
        epoch_max_delta=settings.prompt_epoch_max_delta,
    )
    compiled = compile_request(tc, history, iteration=0, now=now)
    return {
        "session_key": session_key,
        "user_id": user_external_id,
        "session_exists": exists,
        "model": f"{provider}/{model}",
        **describe(tc, compiled),
    }
