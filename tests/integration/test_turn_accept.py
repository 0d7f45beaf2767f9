"""Accepting a turn: what it costs in round trips to Postgres, and that it writes all of a turn or none of it,
also when another request creates the same user at the same moment."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shared.access.auth import authenticate, create_key, ensure_tenant
from shared.infra import db
from shared.infra.db import Conn
from shared.turns.accept import IdempotencyConflict, submit_turn
from tests.support.locks import once_blocked
from tests.support.wire import wire_messages

pytestmark = pytest.mark.integration


def one_statement(sent: Counter[str]) -> bool:
    """One statement and nothing around it (no BEGIN, no COMMIT): one round trip, plus one on the execution
    where psycopg prepares the statement."""
    return sent["Execute"] == 1 and sent["Query"] == 0 and sent["Sync"] == 1 + sent["Prepare"]


def _rows(conn: Conn, tenant_id: int) -> dict[str, list[dict[str, Any]]]:
    return {
        "users": conn.execute("SELECT external_id FROM users WHERE tenant_id = %s", (tenant_id,)).fetchall(),
        "sessions": conn.execute(
            "SELECT id, session_key, channel FROM sessions WHERE tenant_id = %s ORDER BY id", (tenant_id,)
        ).fetchall(),
        "turns": conn.execute(
            "SELECT id, session_id, status FROM turns WHERE tenant_id = %s ORDER BY id", (tenant_id,)
        ).fetchall(),
        "messages": conn.execute(
            "SELECT turn_id, role, content, token_estimate > 0 AS counted FROM session_messages"
            " WHERE tenant_id = %s ORDER BY id",
            (tenant_id,),
        ).fetchall(),
    }


@pytest.mark.parametrize("keys", [(None, None), ("k1", "k2")], ids=["without-key", "with-key"])
def test_a_turn_is_one_round_trip(autocommit_conn: Conn, keys: tuple[str | None, str | None]) -> None:
    tenant_id = ensure_tenant(autocommit_conn, "t1")
    first_key, second_key = keys
    sent = []
    submitted = []
    for text, key in (("hello there", first_key), ("and again", second_key)):
        with wire_messages(autocommit_conn) as counts:
            submitted.append(
                submit_turn(
                    autocommit_conn,
                    tenant_id=tenant_id,
                    session_key="s1",
                    user_external_id="alice",
                    text=text,
                    idempotency_key=key,
                )
            )
        sent.append(counts)
    first, second = submitted
    # A new user and session, then an existing one: one statement each, and no BEGIN or COMMIT around it.
    assert all(one_statement(counts) for counts in sent), sent
    assert not first.replayed and not second.replayed
    turn = first.turn
    assert (turn["session_key"], turn["user_id"], turn["status"], turn["attempts"]) == ("s1", "alice", "queued", 0)
    assert turn["created_at"] is not None and turn["finished_at"] is None
    assert "request_hash" not in turn and "replayed" not in turn
    assert second.turn["session_id"] == turn["session_id"]
    rows = _rows(autocommit_conn, tenant_id)
    assert rows["users"] == [{"external_id": "alice"}]
    assert rows["sessions"] == [{"id": turn["session_id"], "session_key": "s1", "channel": "api"}]
    assert rows["turns"] == [
        {"id": turn["turn_id"], "session_id": turn["session_id"], "status": "queued"},
        {"id": second.turn["turn_id"], "session_id": turn["session_id"], "status": "queued"},
    ]
    assert rows["messages"] == [
        {"turn_id": turn["turn_id"], "role": "user", "content": "hello there", "counted": True},
        {"turn_id": second.turn["turn_id"], "role": "user", "content": "and again", "counted": True},
    ]


def test_a_repeated_idempotency_key_writes_nothing(autocommit_conn: Conn) -> None:
    tenant_id = ensure_tenant(autocommit_conn, "t1")
    request = {"tenant_id": tenant_id, "session_key": "s1", "user_external_id": "alice", "idempotency_key": "k"}
    first = submit_turn(autocommit_conn, text="hello", **request)
    before = _rows(autocommit_conn, tenant_id)
    with wire_messages(autocommit_conn) as sent:
        again = submit_turn(autocommit_conn, text="hello", **request)
    assert one_statement(sent)
    assert again.replayed and again.turn == first.turn
    # The same key for another request: refused, and neither the other user nor their session is created.
    with pytest.raises(IdempotencyConflict):
        submit_turn(autocommit_conn, text="hello", **{**request, "user_external_id": "bob", "session_key": "s2"})
    with pytest.raises(IdempotencyConflict):
        submit_turn(autocommit_conn, text="something else", **request)
    assert _rows(autocommit_conn, tenant_id) == before


def test_authenticating_a_key_is_one_round_trip(autocommit_conn: Conn) -> None:
    key = create_key(autocommit_conn, "t1")
    with wire_messages(autocommit_conn) as sent:
        principal = authenticate(autocommit_conn, key)
    assert principal is not None and principal.name == "t1"
    assert one_statement(sent)


def test_a_user_created_by_another_request_while_the_turn_is_written(clean_state: object) -> None:
    """The one-statement write cannot see a user committed after it began (its snapshot), and its insert of
    that user finds the conflict: it writes nothing, and the turn is written step by step instead."""
    with db.connection() as setup:
        tenant_id = ensure_tenant(setup, "t1")
    with db.connect() as other_request, db.connection(autocommit=True) as conn:
        # Another request has inserted the user and not committed yet; the turn's statement waits on that row.
        other_request.execute("INSERT INTO users (tenant_id, external_id) VALUES (%s, 'bob')", (tenant_id,))
        submitted = once_blocked(
            lambda: submit_turn(conn, tenant_id=tenant_id, session_key="s1", user_external_id="bob", text="hi"),
            conn.info.backend_pid,
            other_request.commit,
        )
    assert (submitted.turn["user_id"], submitted.turn["session_key"], submitted.replayed) == ("bob", "s1", False)
    with db.connection() as check:
        rows = _rows(check, tenant_id)
    assert rows["users"] == [{"external_id": "bob"}]
    assert [s["id"] for s in rows["sessions"]] == [submitted.turn["session_id"]]
    assert [t["id"] for t in rows["turns"]] == [submitted.turn["turn_id"]]
    message = {"turn_id": submitted.turn["turn_id"], "role": "user", "content": "hi", "counted": True}
    assert rows["messages"] == [message]


def test_a_request_that_loses_the_race_for_its_idempotency_key_replays_the_winner(clean_state: object) -> None:
    """Both requests find no turn with the key; the loser's insert of the turn fails on the unique key once
    the winner commits (a statement that failed wrote nothing), and it replays the winner's turn."""
    request = {"session_key": "s1", "user_external_id": "bob", "text": "hi"}
    with db.connection() as setup:
        tenant_id = ensure_tenant(setup, "t1")
        earlier = submit_turn(setup, tenant_id=tenant_id, **request)  # type: ignore[arg-type]
    request["tenant_id"] = tenant_id
    with db.connect() as other_request, db.connection(autocommit=True) as conn:
        # The same request, sent twice: the first has written its turn (and holds the session) uncommitted.
        winner = submit_turn(other_request, idempotency_key="k", **request)  # type: ignore[arg-type]
        replayed = once_blocked(
            lambda: submit_turn(conn, idempotency_key="k", **request),  # type: ignore[arg-type]
            conn.info.backend_pid,
            other_request.commit,
        )
    assert replayed.replayed and replayed.turn["turn_id"] == winner.turn["turn_id"]
    with db.connection() as check:
        rows = _rows(check, tenant_id)
    assert [t["id"] for t in rows["turns"]] == [earlier.turn["turn_id"], winner.turn["turn_id"]]
    assert len(rows["messages"]) == 2 and len(rows["sessions"]) == 1
