"""What one `store_memory` costs in round trips to Postgres, and that sending its statements together
keeps the key lock's guarantee (a writer that waited for the lock sees what the holder committed)."""

from __future__ import annotations

import pytest

from shared.access.auth import ensure_tenant
from shared.infra import db
from shared.infra.db import Conn
from shared.memory.memory_input import MemoryInput
from shared.memory.reads import memory_history
from shared.memory.store import Scope, WriteResult, store_memory
from shared.turns.accept import ensure_user
from tests.support.locks import once_blocked
from tests.support.wire import wire_messages

pytestmark = pytest.mark.integration


def scope_of(conn: Conn) -> Scope:
    tenant_id = ensure_tenant(conn, "t1")
    return Scope(tenant_id, ensure_user(conn, tenant_id, "alice"))


def test_a_new_memory_costs_two_round_trips(conn: Conn) -> None:
    scope = scope_of(conn)
    # An open transaction, so the count is store_memory's alone (not the BEGIN it would otherwise start).
    conn.execute("SELECT 1")
    # No entity mentions: each mention adds its own lookups, the same before and after.
    item = MemoryInput(key="turn-1", value="we talked about the weather all afternoon", kind="episode")
    with wire_messages(conn) as sent:
        result = store_memory(conn, scope, item, "api")
    assert result.action == "added"
    # lock + active row + same-content candidates in one pipeline; the row and its event in one statement.
    assert sent["Sync"] + sent["Query"] == 2
    assert sent["Execute"] + sent["Query"] == 4
    events = conn.execute(
        "SELECT action, namespace, key, old_value, new_value, actor, details FROM memory_events WHERE memory_id = %s",
        (result.memory["id"],),
    ).fetchall()
    assert events == [
        {
            "action": "add",
            "namespace": "episodes",
            "key": "turn-1",
            "old_value": None,
            "new_value": "we talked about the weather all afternoon",
            "actor": "api",
            "details": {},
        }
    ]


def test_a_superseding_write_keeps_its_event_in_the_same_statement(conn: Conn) -> None:
    scope = scope_of(conn)
    first = store_memory(conn, scope, MemoryInput(key="drink", value="green tea", kind="preference"), "api")
    conn.execute("SELECT 1")
    with wire_messages(conn) as sent:
        second = store_memory(conn, scope, MemoryInput(key="drink", value="black coffee", kind="preference"), "api")
    assert second.action == "superseded"
    # the pipeline, closing the old row, the new row with its event
    assert sent["Sync"] + sent["Query"] == 3
    history = memory_history(conn, scope, second.memory["id"])
    assert history is not None
    supersede = [event for event in history if event["action"] == "supersede"]
    assert [(e["old_value"], e["new_value"], e["details"]) for e in supersede] == [
        ("green tea", "black coffee", {"superseded_id": first.memory["id"]})
    ]


def test_a_writer_that_waited_for_the_key_sees_the_holders_row(clean_state: object) -> None:
    """The lookups travel with the lock statement; they must still read after the lock is granted, so the
    second writer of a key supersedes the first one's row instead of adding a second active row."""
    with db.connection() as setup:
        scope = scope_of(setup)
    with db.connection() as holder, db.connection() as waiter_conn:
        store_memory(holder, scope, MemoryInput(key="city", value="Lisbon", kind="fact"), "api")

        def second_writer() -> WriteResult:
            result = store_memory(waiter_conn, scope, MemoryInput(key="city", value="Porto", kind="fact"), "api")
            waiter_conn.commit()
            return result

        # The second writer is blocked on the key's advisory lock before the first commits.
        second = once_blocked(second_writer, waiter_conn.info.backend_pid, holder.commit)
    assert second.action == "superseded"
    with db.connection() as check:
        active = check.execute(
            "SELECT value FROM memories WHERE user_id = %s AND key = 'city' AND valid_until IS NULL", (scope.user_id,)
        ).fetchall()
    assert [row["value"] for row in active] == ["Porto"]
