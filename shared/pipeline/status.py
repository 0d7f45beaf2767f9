"""How far the memory pipeline has got with one session: what a client waits on instead of sleeping."""

from __future__ import annotations

from typing import Any

from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.pipeline.triggers import plan_after_turn
from shared.turns.accept import find_session


def session_memory_status(
    conn: Conn, tenant_id: int, user_external_id: str, session_key: str, channel: str = "api"
) -> dict[str, Any] | None:
    """Messages not mined yet, the last extraction, memories from this session (and those not embedded
    yet, which full-text search already finds but vector search does not), whether a compaction is due
    and how many of its messages' transcript units wait for their vector (full text finds them already);
    None if no such session."""
    session = find_session(conn, tenant_id, user_external_id, session_key, channel)
    if session is None:
        return None
    row = conn.execute(
        """SELECT count(*) AS messages,
                  count(*) FILTER (WHERE extracted_at IS NULL) AS pending_messages,
                  max(extracted_at) AS last_extracted_at,
                  (SELECT count(*) FROM memory_chunks c
                    WHERE c.session_id = %s AND c.message_id IS NOT NULL AND c.embedding IS NULL) AS unindexed
           FROM session_messages WHERE session_id = %s AND tenant_id = %s""",
        (session["id"], session["id"], tenant_id),
    ).fetchone()
    memories = conn.execute(
        """SELECT count(*) AS created,
                  count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id))
                      AS not_embedded
           FROM memories m
           WHERE m.tenant_id = %s AND m.user_id = %s AND m.source_session_id = %s AND m.valid_until IS NULL""",
        (tenant_id, session["user_id"], session["id"]),
    ).fetchone()
    assert row is not None and memories is not None
    pending, not_embedded = int(row["pending_messages"]), int(memories["not_embedded"])
    unindexed = int(row["unindexed"])
    # The same decision the scheduler makes after each turn or batch: a compaction is queued or running.
    compaction_due = plan_after_turn(session, get_settings()).compact
    return {
        "session_key": session_key,
        "user_id": user_external_id,
        "session_id": session["id"],
        "messages": int(row["messages"]),
        "pending_messages": pending,
        "last_extracted_at": row["last_extracted_at"],
        "last_extracted_message_id": session["last_extracted_message_id"],
        "memories_created": int(memories["created"]),
        "memories_pending_embedding": not_embedded,
        "compaction_count": session["compaction_count"],
        "compaction_due": compaction_due,
        "transcript_pending_messages": unindexed,
        "idle": pending == 0 and not_embedded == 0 and not compaction_due and unindexed == 0,
    }
