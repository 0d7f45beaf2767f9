"""Messages from conversations engram does not run: stored in a session, in order, with no agent loop.

A batch is one row of `turns` with kind 'ingest', born 'done' (there is nothing to run). Its messages
carry its id as their turn_id, so they take their place in the session's (turn_id, id) order exactly
like a chat turn's messages: a session may mix ingested batches and chat turns. From there the memory
pipeline treats them like any other message (extraction marks, flush, compaction, transcript indexing);
the caller schedules that work after the commit, as the turns worker does after a turn.

Idempotency has two levels:
- the batch's Idempotency-Key (shared unique index with chat turns): the same key and body replays the
  first answer; the same key with another body is a conflict;
- a message's own key (imports): unique per session; a message whose key is already stored is not
  written again (its stored id is answered), unless its role or content differ (a conflict).
Everything happens in the caller's transaction: a conflict anywhere writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.infra.db import Conn
from shared.text import clean_text, estimate_tokens
from shared.turns.accept import IdempotencyConflict, ensure_session, ensure_user, refresh_token_count

ROLES = ("user", "assistant", "system", "tool")


@dataclass(frozen=True)
class IngestMessage:
    role: str
    content: str
    created_at: datetime | None = None  # when it was said; default: when it arrives
    name: str | None = None  # speaker or tool name
    idempotency_key: str | None = None  # unique per session

    def fingerprint(self) -> list[Any]:
        return [
            self.role,
            self.content,
            self.created_at.isoformat() if self.created_at else None,
            self.name,
            self.idempotency_key,
        ]


@dataclass(frozen=True)
class IngestResult:
    session_id: int
    message_ids: list[int]  # one per message sent, in order (stored earlier for a known message key)
    written: int  # messages the batch wrote (a replay answers the first call's count)
    replayed: bool  # the batch's Idempotency-Key was seen before: nothing was written now
    batch_id: int | None = None


def _request_hash(session_key: str, user_external_id: str, messages: Sequence[IngestMessage], metadata: Any) -> str:
    body = ["ingest", session_key, user_external_id, [m.fingerprint() for m in messages], metadata]
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value  # a time without zone is UTC


def ingest_messages(
    conn: Conn,
    *,
    tenant_id: int,
    user_external_id: str,
    session_key: str,
    messages: Sequence[IngestMessage],
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    channel: str = "api",
) -> IngestResult:
    """Store `messages` at the end of the session, in order, in the caller's transaction.

    Raises IdempotencyConflict (nothing written) when a key was used for something else, ValueError for
    a batch that names one message key twice."""
    if not messages:
        raise ValueError("a batch needs at least one message")
    keys = [m.idempotency_key for m in messages if m.idempotency_key is not None]
    if len(set(keys)) != len(keys):
        raise ValueError("two messages of the batch carry the same idempotency_key")
    request_hash = _request_hash(session_key, user_external_id, messages, metadata)
    if idempotency_key is not None:
        replay = _replay(conn, tenant_id, idempotency_key, request_hash)
        if replay is not None:
            return replay

    user_id = ensure_user(conn, tenant_id, user_external_id)
    session_id = ensure_session(conn, tenant_id, user_id, session_key, channel)
    known = _known_messages(conn, session_id, messages)

    batch = conn.execute(
        """INSERT INTO turns (tenant_id, user_id, session_id, kind, status, idempotency_key, request_hash,
                              attempts, started_at, finished_at)
           VALUES (%s, %s, %s, 'ingest', 'done', %s, %s, 0, now(), now())
           ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
           RETURNING id""",
        (tenant_id, user_id, session_id, idempotency_key, request_hash),
    ).fetchone()
    if batch is None:  # lost a race with a concurrent request carrying the same key: answer as it did
        replay = _replay(conn, tenant_id, idempotency_key or "", request_hash)
        assert replay is not None
        return replay
    batch_id = int(batch["id"])

    ids: list[int] = []
    written = 0
    for index, message in enumerate(messages):
        if message.idempotency_key in known:
            ids.append(known[message.idempotency_key])
            continue
        row = conn.execute(
            """INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, name,
                                             idempotency_key, token_estimate, created_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()))
               ON CONFLICT (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
               RETURNING id""",
            (
                tenant_id,
                user_id,
                session_id,
                batch_id,
                message.role,
                clean_text(message.content),
                clean_text(message.name) if message.name is not None else None,
                message.idempotency_key,
                estimate_tokens(message.content),
                _utc(message.created_at),
            ),
        ).fetchone()
        if row is None:  # a concurrent request stored this message key meanwhile
            existing = _known_messages(conn, session_id, [message])
            if message.idempotency_key not in existing:  # pragma: no cover - the conflict guarantees a row
                raise IdempotencyConflict(f"message {index}: its idempotency_key could not be stored")
            ids.append(existing[message.idempotency_key])
            continue
        ids.append(int(row["id"]))
        written += 1

    conn.execute(
        "UPDATE turns SET details = %s WHERE id = %s",
        (json.dumps({"metadata": metadata or {}, "message_ids": ids, "written": written}), batch_id),
    )
    if written:
        refresh_token_count(conn, session_id)
    return IngestResult(session_id=session_id, message_ids=ids, written=written, replayed=False, batch_id=batch_id)


def _known_messages(conn: Conn, session_id: int, messages: Sequence[IngestMessage]) -> dict[str, int]:
    """Message keys of the batch already stored in the session → their ids; a key stored with another
    role or content is a conflict."""
    wanted = {m.idempotency_key: m for m in messages if m.idempotency_key is not None}
    if not wanted:
        return {}
    rows = conn.execute(
        """SELECT id, idempotency_key, role, content FROM session_messages
           WHERE session_id = %s AND idempotency_key = ANY(%s)""",
        (session_id, list(wanted)),
    ).fetchall()
    known = {}
    for row in rows:
        message = wanted[row["idempotency_key"]]
        if (row["role"], row["content"]) != (message.role, message.content):
            raise IdempotencyConflict(
                f"the message idempotency_key {row['idempotency_key']!r} was already used in this session for "
                "a message with another role or content"
            )
        known[row["idempotency_key"]] = int(row["id"])
    return known


def _replay(conn: Conn, tenant_id: int, key: str, request_hash: str) -> IngestResult | None:
    row = conn.execute(
        "SELECT id, session_id, kind, request_hash, details FROM turns WHERE tenant_id = %s AND idempotency_key = %s",
        (tenant_id, key),
    ).fetchone()
    if row is None:
        return None
    if row["kind"] != "ingest" or row["request_hash"] != request_hash:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used for a different request (session, user, messages or metadata differ)"
        )
    details = row["details"] or {}
    ids = [int(i) for i in details.get("message_ids", [])]
    return IngestResult(
        session_id=int(row["session_id"]),
        message_ids=ids,
        written=int(details.get("written", 0)),
        replayed=True,
        batch_id=int(row["id"]),
    )
