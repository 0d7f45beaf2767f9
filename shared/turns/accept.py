"""Accepting chat turns and reading them back. Everything here is scoped by tenant."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb

from shared.infra.db import Conn, Query
from shared.text import clean_text, estimate_tokens
from shared.turns.rows import KeyedTurnView, MessageRow, SessionRow, TurnView, session_row

TERMINAL_STATUSES = frozenset({"done", "failed"})


class IdempotencyConflict(ValueError):
    """The Idempotency-Key was already used for a different request."""


@dataclass(frozen=True)
class SubmittedTurn:
    turn: TurnView
    replayed: bool  # True when an earlier turn with the same Idempotency-Key was returned


@dataclass(frozen=True)
class NewMessage:
    """A message a turn brings into its session (the REST API: one user message; the OpenAI-compatible
    endpoint: what the client's history adds, e.g. earlier messages, or results of its own tools)."""

    role: str  # user, assistant or tool
    content: str
    tool_calls: Sequence[dict[str, Any]] = ()  # assistant: [{"id", "name", "arguments"}]
    tool_call_id: str | None = None  # tool: the call it answers
    tool_name: str | None = None
    name: str | None = None  # who said it, as the conversation names them (a user's or assistant's name)


@dataclass(frozen=True)
class TurnInput:
    messages: Sequence[NewMessage]
    client: dict[str, Any] | None = field(default=None)  # the turns.client options (OpenAI-compatible requests)


# Decides a turn's input once the session row is locked (so concurrent requests of one session decide in
# turn): a TurnInput, or the id of an open turn the request is already answered by.
TurnPlanner = Callable[[Conn, int], TurnInput | int]


def _request_hash(session_key: str, user_external_id: str, text: str, name: str | None = None) -> str:
    parts = [session_key, user_external_id, text] + ([name] if name is not None else [])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def ensure_user(conn: Conn, tenant_id: int, external_id: str) -> int:
    # DO NOTHING + read, not DO UPDATE: an upsert that "updates" locks the user row FOR UPDATE, and
    # background jobs take KEY SHARE on it (foreign keys) while holding their session row — a deadlock
    # with a turn request that holds the user row and then upserts the session.
    row = conn.execute(
        """INSERT INTO users (tenant_id, external_id) VALUES (%s, %s)
           ON CONFLICT (tenant_id, external_id) DO NOTHING RETURNING id""",
        (tenant_id, external_id),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT id FROM users WHERE tenant_id = %s AND external_id = %s", (tenant_id, external_id)
        ).fetchone()
    assert row is not None
    return int(row["id"])


def ensure_session(conn: Conn, tenant_id: int, user_id: int, session_key: str, channel: str = "api") -> int:
    row = conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, channel, session_key) VALUES (%s, %s, %s, %s)
           ON CONFLICT (user_id, channel, session_key) DO UPDATE SET updated_at = now()
           RETURNING id""",
        (tenant_id, user_id, channel, session_key),
    ).fetchone()
    assert row is not None
    return int(row["id"])


def find_user_id(conn: Conn, tenant_id: int, external_id: str) -> int | None:
    row = conn.execute(
        "SELECT id FROM users WHERE tenant_id = %s AND external_id = %s", (tenant_id, external_id)
    ).fetchone()
    return int(row["id"]) if row else None


def session_query(tenant_id: int, user_external_id: str, session_key: str, channel: str = "api") -> Query:
    return (
        """SELECT s.* FROM sessions s JOIN users u ON u.id = s.user_id
           WHERE s.tenant_id = %s AND u.external_id = %s AND s.session_key = %s AND s.channel = %s""",
        (tenant_id, user_external_id, session_key, channel),
    )


def find_session(
    conn: Conn, tenant_id: int, user_external_id: str, session_key: str, channel: str = "api"
) -> SessionRow | None:
    return session_row(conn.execute(*session_query(tenant_id, user_external_id, session_key, channel)).fetchone())


_TURN_COLUMNS = """t.id AS turn_id, t.session_id, s.session_key, u.external_id AS user_id, t.status,
    t.reply, t.error, t.usage, t.timings, t.attempts, t.created_at, t.started_at, t.finished_at"""


def submit_turn(
    conn: Conn,
    *,
    tenant_id: int,
    session_key: str,
    user_external_id: str,
    text: str = "",
    name: str | None = None,
    idempotency_key: str | None = None,
    channel: str = "api",
    plan: TurnPlanner | None = None,
    fingerprint: str | None = None,
) -> SubmittedTurn:
    """Persist the turn's input messages and a queued turn, atomically: in the caller's transaction, or (on
    an autocommit connection) in one statement or a transaction of its own.

    The REST API passes `text` (one user message) and the speaker's `name` if the client gives one. The
    OpenAI-compatible endpoint passes `plan`, called with the session locked, which decides the input (or
    names an open turn that already answers the request) and a `fingerprint` of the request for the
    Idempotency-Key check. A user message without a name is stored under the user's profile display_name.

    A repeated Idempotency-Key returns the original turn (and writes nothing); the unique index
    makes two concurrent requests with the same key agree on one turn.
    """
    text, name = clean_text(text), (clean_text(name) if name is not None else None)
    request_hash = _request_hash(session_key, user_external_id, text if fingerprint is None else fingerprint, name)
    # A user message (the REST API, a channel) in one round trip instead of seven or more. With a key, only
    # on an autocommit connection: losing the key's race fails the statement, which must not abort a
    # transaction of the caller's.
    if plan is None and (idempotency_key is None or conn.autocommit):
        try:
            row = _insert_user_turn(
                conn, tenant_id, session_key, user_external_id, text, name, channel, idempotency_key, request_hash
            )
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != "turns_idempotency_idx":
                raise
            row = None  # a concurrent request with the same key committed first: replayed step by step below
        if row is not None:
            if row.pop("replayed"):
                return _replay(row, request_hash)
            row.pop("request_hash")
            return SubmittedTurn(turn=row, replayed=False)
    with conn.transaction() if conn.autocommit else nullcontext():
        return _submit_step_by_step(
            conn, tenant_id, session_key, user_external_id, text, name, idempotency_key, channel, plan, request_hash
        )


# A turn of one user message in one statement: the turn an Idempotency-Key already names, or else user,
# session, turn and message, all or nothing. The session upsert locks the session row as ensure_session does.
# No row comes back, and nothing is written, when the user was created by a concurrent request that
# committed after this statement began (its insert finds the conflict, its snapshot does not show the row);
# a concurrent request that committed the same key first makes the turn's insert fail (a unique violation).
# Either way the caller goes step by step, whose statements see what the other request wrote.
_INSERT_USER_TURN = f"""
WITH existing AS (
    SELECT * FROM turns WHERE tenant_id = %(tenant)s AND idempotency_key = %(key)s),
new_user AS (
    INSERT INTO users (tenant_id, external_id)
    SELECT %(tenant)s, %(user)s WHERE NOT EXISTS (SELECT FROM existing)
    ON CONFLICT (tenant_id, external_id) DO NOTHING RETURNING id),
found_user AS (
    SELECT id FROM new_user
    UNION ALL SELECT id FROM users
        WHERE tenant_id = %(tenant)s AND external_id = %(user)s AND NOT EXISTS (SELECT FROM existing)
    LIMIT 1),
session AS (
    INSERT INTO sessions (tenant_id, user_id, channel, session_key)
    SELECT %(tenant)s, id, %(channel)s, %(session_key)s FROM found_user
    ON CONFLICT (user_id, channel, session_key) DO UPDATE SET updated_at = now()
    RETURNING id, user_id),
t AS (
    INSERT INTO turns (tenant_id, user_id, session_id, idempotency_key, request_hash)
    SELECT %(tenant)s, user_id, id, %(key)s, %(hash)s FROM session
    RETURNING *),
message AS (
    INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, name, token_estimate)
    SELECT %(tenant)s, t.user_id, t.session_id, t.id, 'user', %(text)s,
           coalesce(%(name)s::text, (SELECT display_name FROM users WHERE id = t.user_id)), %(tokens)s FROM t)
SELECT {_TURN_COLUMNS}, t.request_hash, false AS replayed FROM t,
    (SELECT %(session_key)s::text AS session_key) s, (SELECT %(user)s::text AS external_id) u
UNION ALL
SELECT {_TURN_COLUMNS}, t.request_hash, true FROM existing t
    JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = t.user_id"""


def _insert_user_turn(
    conn: Conn,
    tenant_id: int,
    session_key: str,
    user_external_id: str,
    text: str,
    name: str | None,
    channel: str,
    idempotency_key: str | None,
    request_hash: str,
) -> KeyedTurnView | None:
    row = conn.execute(
        _INSERT_USER_TURN,
        {
            "tenant": tenant_id,
            "user": user_external_id,
            "channel": channel,
            "session_key": session_key,
            "key": idempotency_key,
            "hash": request_hash,
            "text": text,
            "name": name,
            "tokens": estimate_tokens(text),
        },
    ).fetchone()
    return cast("KeyedTurnView | None", row)


def _submit_step_by_step(
    conn: Conn,
    tenant_id: int,
    session_key: str,
    user_external_id: str,
    text: str,
    name: str | None,
    idempotency_key: str | None,
    channel: str,
    plan: TurnPlanner | None,
    request_hash: str,
) -> SubmittedTurn:
    if idempotency_key is not None:
        existing = _turn_by_idempotency_key(conn, tenant_id, idempotency_key)
        if existing is not None:
            return _replay(existing, request_hash)

    user_id = ensure_user(conn, tenant_id, user_external_id)
    # The upsert locks the session row until commit: concurrent submissions of one session (and their
    # `plan`s, which read its history) take their turns one after the other.
    session_id = ensure_session(conn, tenant_id, user_id, session_key, channel)
    planned = TurnInput([NewMessage("user", text, name=name)]) if plan is None else plan(conn, session_id)
    if isinstance(planned, int):
        joined = get_turn(conn, tenant_id, planned)
        assert joined is not None
        return SubmittedTurn(turn=joined, replayed=True)
    client = None if planned.client is None else Jsonb({**planned.client, "inputs": len(planned.messages)})
    row = conn.execute(
        """INSERT INTO turns (tenant_id, user_id, session_id, idempotency_key, request_hash, client)
           VALUES (%s, %s, %s, %s, %s, %s)
           ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
           RETURNING id""",
        (tenant_id, user_id, session_id, idempotency_key, request_hash, client),
    ).fetchone()
    if row is None:  # lost a race with a concurrent request carrying the same key
        existing = _turn_by_idempotency_key(conn, tenant_id, idempotency_key or "")
        assert existing is not None
        return _replay(existing, request_hash)
    turn_id = int(row["id"])
    with conn.cursor() as cur:
        cur.executemany(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, tool_calls,
                                             tool_results, token_estimate, name)
               SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s,
                      coalesce(%s::text, CASE WHEN %s::text = 'user'
                                              THEN (SELECT display_name FROM users WHERE id = %s) END)""",
            [
                (tenant_id, user_id, session_id, turn_id, *_message_columns(m), _name(m), m.role, user_id)
                for m in planned.messages
            ],
        )
    turn = get_turn(conn, tenant_id, turn_id)
    assert turn is not None
    return SubmittedTurn(turn=turn, replayed=False)


def _name(message: NewMessage) -> str | None:
    return clean_text(message.name) if message.name is not None else None


def _message_columns(message: NewMessage) -> tuple[Any, ...]:
    calls = [dict(call) for call in message.tool_calls]
    results = None
    if message.role == "tool":
        results = {"tool_call_id": message.tool_call_id, "name": message.tool_name, "is_error": False}
    tokens = estimate_tokens(message.content) + (estimate_tokens(json.dumps(calls)) if calls else 0)
    return (
        message.role,
        clean_text(message.content),
        Jsonb(calls) if calls else None,
        Jsonb(results) if results is not None else None,
        tokens,
    )


def _turn_by_idempotency_key(conn: Conn, tenant_id: int, key: str) -> KeyedTurnView | None:
    row = conn.execute(
        f"""SELECT {_TURN_COLUMNS}, t.request_hash FROM turns t
            JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = t.user_id
            WHERE t.tenant_id = %s AND t.idempotency_key = %s""",
        (tenant_id, key),
    ).fetchone()
    return cast("KeyedTurnView | None", row)


def _replay(existing: KeyedTurnView, request_hash: str) -> SubmittedTurn:
    if existing.pop("request_hash") != request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used for a different request (session, user or text differ)"
        )
    return SubmittedTurn(turn=existing, replayed=True)


def get_turn(conn: Conn, tenant_id: int, turn_id: int) -> TurnView | None:
    row = conn.execute(
        f"""SELECT {_TURN_COLUMNS} FROM turns t
            JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = t.user_id
            WHERE t.tenant_id = %s AND t.id = %s AND t.kind = 'chat'""",
        (tenant_id, turn_id),
    ).fetchone()
    return cast("TurnView | None", row)


def list_messages(
    conn: Conn, tenant_id: int, user_external_id: str, session_key: str, limit: int = 100
) -> list[MessageRow] | None:
    """The latest `limit` messages of a session in conversation order; None if no such session."""
    session = find_session(conn, tenant_id, user_external_id, session_key)
    if session is None:
        return None
    rows = conn.execute(
        """SELECT * FROM (
               SELECT id, turn_id, role, name, content, tool_calls, tool_results, is_compacted, created_at
               FROM session_messages WHERE session_id = %s AND tenant_id = %s
               ORDER BY turn_id DESC NULLS LAST, id DESC LIMIT %s) recent
           ORDER BY turn_id NULLS FIRST, id""",
        (session["id"], tenant_id, limit),
    ).fetchall()
    return cast("list[MessageRow]", rows)


def lock_session_row(conn: Conn, session_id: int) -> None:
    """Lock the session row for the rest of the transaction. Every transaction that writes both a session
    and its turns takes the session row first: a request (submit_turn) holds it while its insert may wait
    on a turn row, so a writer holding a turn row while waiting for the session would deadlock with it
    (Postgres then aborts one after a second: a 503 for the request, or a paid model call run again)."""
    conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR NO KEY UPDATE", (session_id,))


# A session's live (not compacted) size, which decides flush and compaction; `%(session)s` is its id.
LIVE_TOKEN_COUNT = """(SELECT coalesce(sum(token_estimate), 0) FROM session_messages
                        WHERE session_id = %(session)s AND NOT is_compacted)"""


def refresh_token_count(conn: Conn, session_id: int) -> None:
    """Store the session's live size (LIVE_TOKEN_COUNT)."""
    conn.execute(
        f"UPDATE sessions SET updated_at = now(), token_count = {LIVE_TOKEN_COUNT} WHERE id = %(session)s",
        {"session": session_id},
    )
