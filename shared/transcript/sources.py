"""Where a memory came from: the messages it was learned from, with their conversation, time and speaker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.infra.db import Conn
from shared.memory.store import Scope

# A memory keeps every message it was learned from; a reader is shown the first ones.
MAX_SOURCES_SHOWN = 20
EXCERPT_CHARS = 1000


@dataclass(frozen=True)
class MessageSource:
    message_id: int
    session_key: str
    said_at: datetime
    speaker: str
    excerpt: str | None = None  # the message's text, when asked for

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "session_key": self.session_key,
            "said_at": self.said_at,
            "speaker": self.speaker,
            "excerpt": self.excerpt,
        }


def message_sources(
    conn: Conn, scope: Scope, message_ids: Sequence[int], *, excerpts: bool = False
) -> list[MessageSource]:
    """The user's messages among `message_ids` that still exist (an erased message is no source), in the
    order they were said; the speaker is the name the conversation gave, else the role."""
    ids = list(dict.fromkeys(message_ids))[:MAX_SOURCES_SHOWN]
    if not ids:
        return []
    rows = conn.execute(
        """SELECT m.id, s.session_key, m.created_at, engram_transcript_line(m.name, m.role, '') AS line,
                  left(m.content, %s) AS content
           FROM session_messages m JOIN sessions s ON s.id = m.session_id
           WHERE m.tenant_id = %s AND m.user_id = %s AND m.id = ANY(%s)
           ORDER BY m.created_at, m.id""",
        (EXCERPT_CHARS, scope.tenant_id, scope.user_id, ids),
    ).fetchall()
    return [
        MessageSource(
            message_id=row["id"],
            session_key=row["session_key"],
            said_at=row["created_at"],
            speaker=row["line"].removesuffix(": "),
            excerpt=row["content"] if excerpts else None,
        )
        for row in rows
    ]
