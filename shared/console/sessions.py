"""A user's sessions and a session's transcript for the console: messages in conversation order with their
turn's status, usage and latency, and the session's compaction state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from shared.console.paging import Page, make_page, page_bounds
from shared.infra.db import Conn
from shared.llm.ledger import calls_by_purpose
from shared.memory.store import Scope
from shared.turns.accept import find_session
from shared.turns.rows import MessageRow, SessionRow

TRANSCRIPT_PAGE = 100


def list_sessions(conn: Conn, scope: Scope, *, page: int = 1) -> Page:
    """The user's sessions, most recently active first, with their message and turn counts."""
    limit, offset = page_bounds(page)
    rows = conn.execute(
        # Turns counted by their messages (the session_messages (session_id, turn_id, id) index): the turns
        # table has no index by session for finished turns.
        """SELECT s.id, s.session_key, s.channel, s.compaction_count, s.token_count, s.created_at, s.updated_at,
                  c.messages, c.turns
           FROM (SELECT * FROM sessions WHERE tenant_id = %s AND user_id = %s
                 ORDER BY updated_at DESC, id DESC LIMIT %s OFFSET %s) s
           CROSS JOIN LATERAL (SELECT count(*) AS messages, count(DISTINCT turn_id) AS turns
                               FROM session_messages WHERE session_id = s.id) c
           ORDER BY s.updated_at DESC, s.id DESC""",
        (scope.tenant_id, scope.user_id, limit, offset),
    ).fetchall()
    return make_page(rows, page)


class TranscriptMessage(MessageRow):
    """A message as the console's transcript page reads it: with its token estimate."""

    token_estimate: int


@dataclass(frozen=True)
class Transcript:
    session: SessionRow
    messages: list[TranscriptMessage]
    turns: dict[int, dict[str, Any]]
    llm_calls: dict[str, Any]
    page: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.page > 1


def _page_of_message(conn: Conn, session_id: int, message_id: int) -> int:
    row = conn.execute(
        """SELECT count(*) AS before FROM session_messages m, session_messages target
           WHERE target.id = %(id)s AND target.session_id = %(session)s AND m.session_id = %(session)s
             AND (coalesce(m.turn_id, 0), m.id) < (coalesce(target.turn_id, 0), target.id)""",
        {"id": message_id, "session": session_id},
    ).fetchone()
    return int(row["before"]) // TRANSCRIPT_PAGE + 1 if row else 1


def transcript(
    conn: Conn, tenant_id: int, user_external_id: str, session_key: str, *, channel: str, page: int, message_id: int
) -> Transcript | None:
    """A page of the session's messages (the page holding `message_id` when it is given), each turn they belong
    to, and the session's LLM calls by purpose; None when the user has no such session."""
    session = find_session(conn, tenant_id, user_external_id, session_key, channel)
    if session is None:
        return None
    if message_id:
        page = _page_of_message(conn, session["id"], message_id)
    limit, offset = page_bounds(page, TRANSCRIPT_PAGE)
    rows = cast(
        "list[TranscriptMessage]",
        conn.execute(
            """SELECT id, turn_id, role, name, content, tool_calls, tool_results, is_compacted, token_estimate,
                      created_at
               FROM session_messages WHERE session_id = %s AND tenant_id = %s
               ORDER BY turn_id NULLS FIRST, id LIMIT %s OFFSET %s""",
            (session["id"], tenant_id, limit, offset),
        ).fetchall(),
    )
    shown = rows[:TRANSCRIPT_PAGE]
    turn_ids = sorted({row["turn_id"] for row in shown if row["turn_id"] is not None})
    turns = conn.execute(
        """SELECT id, kind, status, error, usage, timings, attempts, created_at, started_at, finished_at,
                  round(extract(epoch FROM finished_at - created_at) * 1000) AS latency_ms
           FROM turns WHERE session_id = %s AND id = ANY(%s)""",
        (session["id"], turn_ids),
    ).fetchall()
    return Transcript(
        session=session,
        messages=shown,
        turns={turn["id"]: turn for turn in turns},
        llm_calls=calls_by_purpose(conn, session_id=session["id"]),
        page=max(page, 1),
        has_next=len(rows) > TRANSCRIPT_PAGE,
    )
