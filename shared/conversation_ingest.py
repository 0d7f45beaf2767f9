"""Messages of a conversation engram did not run, stored in a session in order (no agent loop).

Interim for the MCP `conversation_ingest` tool: the ingest branch brings `shared/ingest.py`
(`ingest_messages`, with per-message idempotency and an 'ingest' turn kind); once merged, the tool
should call that one function. Here a batch is a turn row born 'done' with no reply, so its
messages take their place in the session's (turn_id, id) order like a chat turn's; the caller
schedules the same memory work as after a turn, once the transaction committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.db import Conn
from shared.turns import NewMessage, _message_columns, ensure_session, ensure_user, refresh_token_count

ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Ingested:
    session_id: int
    batch_id: int
    message_ids: list[int]


def ingest_conversation(
    conn: Conn, *, tenant_id: int, user_external_id: str, session_key: str, messages: Sequence[NewMessage]
) -> Ingested:
    if not messages:
        raise ValueError("send at least one message")
    for index, message in enumerate(messages):
        if message.role not in ROLES:
            raise ValueError(f"messages[{index}]: role must be one of {', '.join(ROLES)}")
        if not message.content.strip():
            raise ValueError(f"messages[{index}]: content is empty")
    user_id = ensure_user(conn, tenant_id, user_external_id)
    session_id = ensure_session(conn, tenant_id, user_id, session_key)
    batch = conn.execute(
        """INSERT INTO turns (tenant_id, user_id, session_id, status, started_at, finished_at)
           VALUES (%s, %s, %s, 'done', now(), now()) RETURNING id""",
        (tenant_id, user_id, session_id),
    ).fetchone()
    assert batch is not None
    ids = []
    for message in messages:
        row = conn.execute(
            """INSERT INTO session_messages
                   (tenant_id, user_id, session_id, turn_id, role, content, tool_calls, tool_results, token_estimate)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id""",
            (tenant_id, user_id, session_id, batch["id"], *_message_columns(message)),
        ).fetchone()
        assert row is not None
        ids.append(int(row["id"]))
    refresh_token_count(conn, session_id)
    return Ingested(session_id, int(batch["id"]), ids)
