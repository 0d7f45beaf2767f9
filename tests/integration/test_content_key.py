"""The stored content key behind "the same content is already stored under another key": new rows are
found by the key through its index, rows from before migration 0014 are still compared value by value
until the nightly decay run keys them, and a user's size no longer sets the cost of a store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.infra import migrate
from shared.infra.config import get_settings
from shared.infra.db import Conn, connect
from shared.maintenance import jobs
from shared.memory.content_keys import backfill_batch
from shared.memory.keys import content_key
from shared.memory.memory_input import MemoryInput
from shared.memory.reads import list_memories
from shared.memory.store import Scope, same_content_statement, store_memory
from tests.support.scopes import make_scope
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

SAME_LENGTH = 2000  # memories of one user, one namespace, one length class: what the old check read


@pytest.fixture
def conn(autocommit_conn: Conn) -> Conn:
    return autocommit_conn


def stored_key(conn: Conn, memory_id: int) -> bytes | None:
    row = conn.execute("SELECT content_key FROM memories WHERE id = %s", (memory_id,)).fetchone()
    assert row is not None
    return None if row["content_key"] is None else bytes(row["content_key"])


def test_a_new_memory_carries_its_key_and_the_same_content_elsewhere_is_a_duplicate(conn: Conn) -> None:
    scope = make_scope(conn)
    first = store_memory(conn, scope, MemoryInput(key="city", value="Lives in  Lisbon."), "api").memory
    assert stored_key(conn, first["id"]) == content_key("lives in lisbon")
    again = store_memory(conn, scope, MemoryInput(key="home-town", value="LIVES IN LISBON"), "api")
    assert (again.action, again.memory["id"]) == ("duplicate", first["id"])
    # Other namespaces, other users and other content are not duplicates.
    other_ns = store_memory(conn, scope, MemoryInput(key="x", value="lives in lisbon", namespace="notes"), "api")
    bob = store_memory(conn, make_scope(conn, "bob"), MemoryInput(key="y", value="lives in lisbon"), "api")
    other = store_memory(conn, scope, MemoryInput(key="z", value="lives in Porto"), "api")
    assert (other_ns.action, bob.action, other.action) == ("added", "added", "added")
    # A superseding row is keyed too: its value is the one future stores must match.
    moved = store_memory(conn, scope, MemoryInput(key="city", value="Lives in Porto!"), "api")
    assert moved.action == "superseded" and stored_key(conn, moved.memory["id"]) == content_key("lives in porto")


def test_a_legacy_row_is_still_a_duplicate_and_the_nightly_run_keys_it(conn: Conn) -> None:
    scope = make_scope(conn)
    legacy = store_memory(conn, scope, MemoryInput(key="city", value="Lisbon"), "api").memory
    conn.execute("UPDATE memories SET content_key = NULL WHERE id = %s", (legacy["id"],))  # as before 0014

    elsewhere = store_memory(conn, scope, MemoryInput(key="home-town", value="lisbon."), "api")
    assert (elsewhere.action, elsewhere.memory["id"]) == ("duplicate", legacy["id"])
    assert len(list_memories(conn, scope)) == 1

    result = jobs.run("decay", get_settings(), as_of=datetime.now(UTC))
    assert result.counts["content_keys_filled"] == 1
    assert stored_key(conn, legacy["id"]) == content_key("Lisbon")
    # Keyed, it is found through the index branch; a second run has nothing left to key.
    again = store_memory(conn, scope, MemoryInput(key="born-in", value="LISBON"), "api")
    assert (again.action, again.memory["id"]) == ("duplicate", legacy["id"])
    assert backfill_batch(conn, scope.tenant_id, scope.user_id) == 0


def test_backfill_skips_rows_a_writer_holds_and_works_in_batches(conn: Conn, clean_state: TestServices) -> None:
    scope = make_scope(conn)
    ids = [store_memory(conn, scope, MemoryInput(key=f"k{i}", value=f"fact {i}"), "api").memory["id"] for i in range(5)]
    conn.execute("UPDATE memories SET content_key = NULL WHERE id = ANY(%s)", (ids,))
    with connect() as writer:  # another transaction holds one row, as a supersede would
        writer.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (ids[0],))
        assert backfill_batch(conn, scope.tenant_id, scope.user_id, limit=2) == 2
        assert backfill_batch(conn, scope.tenant_id, scope.user_id, limit=10) == 2  # ids[0] skipped, not waited on
        writer.rollback()
    assert backfill_batch(conn, scope.tenant_id, scope.user_id) == 1
    assert [stored_key(conn, i) for i in ids] == [content_key(f"fact {i}") for i in range(5)]


def seed_same_length(conn: Conn, scope: Scope, legacy: bool) -> None:
    """SAME_LENGTH episodes of one length class, written as store_memory writes them (keyed or legacy)."""
    values = [f"turn {n:05d}: we talked about the weather and the trip" for n in range(SAME_LENGTH)]
    conn.execute(
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, content_key)
           SELECT %s, %s, 'episodes', k, v, 'episode', ck
             FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS s(k, v, ck)""",
        (
            scope.tenant_id,
            scope.user_id,
            [f"turn-{n}" for n in range(SAME_LENGTH)],
            values,
            [None if legacy else content_key(v) for v in values],
        ),
    )
    conn.execute("ANALYZE memories")


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain_check(conn: Conn, scope: Scope, value: str) -> list[dict[str, Any]]:
    sql, params = same_content_statement(scope, "episodes", "turn-new", value)
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    return list(plan_nodes(next(iter(row.values()))[0]["Plan"]))


def rows_read(plan: list[dict[str, Any]]) -> int:
    scans = [n for n in plan if "Scan" in n["Node Type"]]
    return sum(int(n["Actual Rows"]) + int(n.get("Rows Removed by Filter", 0)) for n in scans)


def test_the_check_is_an_index_probe_whatever_the_users_size(conn: Conn) -> None:
    scope = make_scope(conn)
    seed_same_length(conn, scope, legacy=False)
    value = "turn 99999: we talked about the weather and the trip"  # same length class, new content
    plan = explain_check(conn, scope, value)
    # Before: every one of the SAME_LENGTH memories was read and compared in Python.
    assert rows_read(plan) <= 3
    used = {n.get("Index Name") for n in plan}
    assert {"memories_content_key_idx", "memories_content_key_legacy_idx"} <= used
    # And the same content still matches, in one probe.
    duplicate = "Turn 00042: we talked about the weather and the trip."
    assert rows_read(explain_check(conn, scope, duplicate)) <= 3
    result = store_memory(conn, scope, MemoryInput(key="turn-x", value=duplicate, kind="episode"), "api")
    assert result.action == "duplicate" and result.memory["key"] == "turn-42"


def test_legacy_rows_cost_what_they_did_until_keyed_then_nothing(conn: Conn) -> None:
    scope = make_scope(conn)
    seed_same_length(conn, scope, legacy=True)
    value = "turn 99999: we talked about the weather and the trip"
    assert rows_read(explain_check(conn, scope, value)) >= SAME_LENGTH  # compared value by value, as before
    jobs.run("decay", get_settings(), as_of=datetime.now(UTC))
    left = conn.execute("SELECT count(*) AS n FROM memories WHERE content_key IS NULL").fetchone()
    assert left == {"n": 0}
    conn.execute("VACUUM ANALYZE memories")
    assert rows_read(explain_check(conn, scope, value)) <= 3


# ------------------------------------------------------------------------------------------ migration


def test_the_migration_applies_to_a_database_with_memories(fresh_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    everything = migrate.available_migrations()
    with connect(fresh_db_url, autocommit=True) as conn:
        monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in everything if m.version < 14])
        migrate.apply_migrations(conn)
        scope = make_scope(conn)
        conn.execute(
            """INSERT INTO memories (tenant_id, user_id, namespace, key, value)
               VALUES (%s, %s, 'tacit/facts', 'city', 'Lisbon'), (%s, %s, 'tacit/facts', 'job', 'Teacher')""",
            (scope.tenant_id, scope.user_id, scope.tenant_id, scope.user_id),
        )
        monkeypatch.setattr(migrate, "available_migrations", lambda: everything)
        assert [m.version for m in migrate.apply_migrations(conn)] == [m.version for m in everything if m.version >= 14]
        rows = conn.execute("SELECT key, content_key FROM memories ORDER BY key").fetchall()
        assert rows == [{"key": "city", "content_key": None}, {"key": "job", "content_key": None}]
        duplicate = store_memory(conn, scope, MemoryInput(key="home-town", value="lisbon!"), "api")
        assert duplicate.action == "duplicate" and duplicate.memory["key"] == "city"
        assert backfill_batch(conn, scope.tenant_id, scope.user_id) == 2
        keys = {r["key"]: bytes(r["content_key"]) for r in conn.execute("SELECT key, content_key FROM memories")}
        assert keys == {"city": content_key("Lisbon"), "job": content_key("Teacher")}
