"""By-id writes filter by owner in the statement itself: handed another user's row or id (as a bug or a
forged request might), the shared write functions change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from shared.infra.db import Conn
from shared.memory.memory_input import MemoryInput, prepare
from shared.memory.store import (
    MemoryNotActive,
    Scope,
    _reinforce,
    _supersede,
    confirm_memory,
    correct_memory,
    delete_memory,
    store_memory,
    update_attributes,
)
from tests.integration.test_memory_store import make_scope

pytestmark = pytest.mark.integration


def row(conn: Conn, memory_id: int) -> dict[str, Any]:
    found = conn.execute("SELECT * FROM memories WHERE id = %s", (memory_id,)).fetchone()
    assert found is not None
    return found


def memories_of(conn: Conn, scope: Scope) -> int:
    counted = conn.execute(
        "SELECT count(*) AS n FROM memories WHERE tenant_id = %s AND user_id = %s", (scope.tenant_id, scope.user_id)
    ).fetchone()
    assert counted is not None
    return int(counted["n"])


@pytest.fixture
def alice_and_bob(conn: Conn) -> tuple[Scope, Scope, dict[str, Any], dict[str, Any]]:
    alice, bob = make_scope(conn, "alice", "tenant-a"), make_scope(conn, "bob", "tenant-b")
    fact = store_memory(conn, alice, MemoryInput(key="city", value="Lives in Lisbon"), "api").memory
    style = store_memory(conn, alice, MemoryInput(key="terse", value="Writes tersely", kind="style"), "api").memory
    return alice, bob, fact, style


def test_superseding_someone_elses_row_changes_nothing(
    conn: Conn, alice_and_bob: tuple[Scope, Scope, dict[str, Any], dict[str, Any]]
) -> None:
    _, bob, fact, _ = alice_and_bob
    before = row(conn, fact["id"])
    item = prepare(MemoryInput(key="city", value="Lives in Porto"))
    with pytest.raises(MemoryNotActive):
        _supersede(conn, bob, fact, item, "api")
    assert row(conn, fact["id"]) == before  # still active, same value
    assert memories_of(conn, bob) == 0


def test_reinforcing_someone_elses_row_changes_nothing(
    conn: Conn, alice_and_bob: tuple[Scope, Scope, dict[str, Any], dict[str, Any]]
) -> None:
    _, bob, _, style = alice_and_bob
    before = row(conn, style["id"])
    with pytest.raises(MemoryNotActive):
        _reinforce(conn, bob, style, "api")
    assert row(conn, style["id"]) == before


def test_a_stale_row_is_not_superseded_twice(
    conn: Conn, alice_and_bob: tuple[Scope, Scope, dict[str, Any], dict[str, Any]]
) -> None:
    # What a correction that lost a race holds: the row as it was before another writer replaced it.
    alice, _, fact, _ = alice_and_bob
    successor = store_memory(conn, alice, MemoryInput(key="city", value="Lives in Porto"), "api").memory
    with pytest.raises(MemoryNotActive):
        _supersede(conn, alice, fact, prepare(MemoryInput(key="city", value="Lives in Faro")), "api")
    active = conn.execute(
        "SELECT id FROM memories WHERE user_id = %s AND key = 'city' AND valid_until IS NULL", (alice.user_id,)
    ).fetchall()
    assert [r["id"] for r in active] == [successor["id"]]


def test_by_id_functions_given_another_users_id_change_nothing(
    conn: Conn, alice_and_bob: tuple[Scope, Scope, dict[str, Any], dict[str, Any]]
) -> None:
    _, bob, fact, _ = alice_and_bob
    before = row(conn, fact["id"])
    assert update_attributes(conn, bob, fact["id"], "api", confidence=0.1, tags=["x"]) is None
    assert correct_memory(conn, bob, fact["id"], "Lives in Porto", "api") is None
    assert confirm_memory(conn, bob, fact["id"], "api") is None
    assert delete_memory(conn, bob, fact["id"], "api") is None
    assert row(conn, fact["id"]) == before
    assert memories_of(conn, bob) == 0
    events = conn.execute("SELECT count(*) AS n FROM memory_events WHERE user_id = %s", (bob.user_id,)).fetchone()
    assert events is not None and events["n"] == 0
