"""The memory-write service every surface writes through (shared/memory/writes.py), on real Postgres: a store
creates its user and queues the new memory's embedding after the commit, once; the refusals name what went
wrong (unknown user, unknown or no longer active memory); a queue that is away costs the write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from shared.access.auth import ensure_tenant
from shared.infra import db
from shared.memory import writes
from shared.memory.memory_input import MemoryInput
from shared.memory.reads import get_memory
from shared.memory.writes import Attributes, MemoryGone, NoSuchMemory, UnknownUser, UserRef, find_scope

pytestmark = pytest.mark.integration


@pytest.fixture
def tenant(clean_state: Any) -> int:
    with db.connection() as conn:
        return ensure_tenant(conn, "t1")


def test_a_store_creates_its_user_and_queues_one_embedding_per_new_text(tenant: int) -> None:
    queued: list[int] = []
    alice = UserRef(tenant, "alice")
    first = writes.store(alice, MemoryInput(key="drink", value="green tea"), "api", enqueue=queued.append)
    again = writes.store(alice, MemoryInput(key="drink", value="green tea"), "api", enqueue=queued.append)
    changed = writes.correct(alice, first.memory["id"], "black tea", "api", enqueue=queued.append)

    assert (first.action, again.action, changed.action) == ("added", "unchanged", "superseded")
    assert queued == [first.memory["id"], changed.memory["id"]]  # the same text is not embedded again
    with db.connection() as conn:
        scope = find_scope(conn, tenant, "alice")
        assert scope is not None
        stored = get_memory(conn, scope, changed.memory["id"])
    assert stored is not None and stored["value"] == "black tea"


def test_refusals_say_what_is_missing(tenant: int) -> None:
    with pytest.raises(UnknownUser):
        writes.correct(UserRef(tenant, "nobody"), 1, "x", "api")
    alice = UserRef(tenant, "alice")
    memory = writes.store(alice, MemoryInput(key="city", value="Lisbon"), "api", enqueue=None).memory
    with pytest.raises(NoSuchMemory):
        writes.amend(alice, memory["id"] + 1000, "api", value="Porto", enqueue=None)
    writes.delete(alice, memory["id"], "api")
    with pytest.raises(MemoryGone):
        writes.amend(alice, memory["id"], "api", attributes=Attributes(tags=["home"]), enqueue=None)
    with pytest.raises(MemoryGone):
        writes.delete(alice, memory["id"], "api")
    restored = writes.restore(alice, memory["id"], "api", enqueue=None)
    assert restored.memory["value"] == "Lisbon" and restored.memory["id"] != memory["id"]


def test_a_queue_that_is_away_does_not_undo_the_write(tenant: int) -> None:
    def broker_down(memory_id: int) -> None:
        raise ConnectionError("broker away")

    alice = UserRef(tenant, "alice")
    result = writes.store(alice, MemoryInput(key="pet", value="a cat named Miso"), "api", enqueue=broker_down)
    with db.connection() as conn:
        scope = find_scope(conn, tenant, "alice")
        assert scope is not None
        assert get_memory(conn, scope, result.memory["id"]) is not None


def _events(memory_ids: list[int]) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute(
            "SELECT memory_id, action, old_value, actor, details FROM memory_events WHERE memory_id = ANY(%s)"
            " AND action = 'delete' ORDER BY id",
            (memory_ids,),
        ).fetchall()


def _active(memory_id: int) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT valid_until IS NULL AS active FROM memories WHERE id = %s", (memory_id,))
        return bool(row.fetchone()["active"])


def _reflection(owner: UserRef, key: str, sources: list[int]) -> int:
    item = MemoryInput(key=key, value=f"A week of {key}", kind="reflection", metadata={"source_memory_ids": sources})
    return int(writes.store(owner, item, "reflection", enqueue=None).memory["id"])


def test_a_bulk_delete_records_each_memory_and_releases_what_was_built_from_them(tenant: int) -> None:
    alice = UserRef(tenant, "alice")
    tea, bike, city = (
        int(writes.store(alice, MemoryInput(key=k, value=v), "api", enqueue=None).memory["id"])
        for k, v in (("tea", "Drinks jasmine tea"), ("bike", "Rides a red bicycle"), ("city", "Lives in Porto"))
    )
    week = _reflection(alice, "week-1", [tea, bike, city])
    with db.connection() as conn:
        scope = find_scope(conn, tenant, "alice")
        assert scope is not None
        entity = conn.execute(
            """INSERT INTO entities (tenant_id, user_id, canonical_name, normalized_name, entity_type)
               VALUES (%s, %s, 'Jasmine', 'jasmine', 'thing') RETURNING id""",
            (scope.tenant_id, scope.user_id),
        ).fetchone()["id"]
        conn.execute("INSERT INTO memory_entities (memory_id, entity_id) VALUES (%s, %s)", (tea, entity))

    assert writes.delete_many(alice, [bike, tea, tea], "console") == 2

    assert [(e["memory_id"], e["old_value"], e["actor"]) for e in _events([tea, bike])] == [
        (tea, "Drinks jasmine tea", "console"),
        (bike, "Rides a red bicycle", "console"),
    ]
    assert not _active(tea) and not _active(bike) and _active(city)
    # The reflection built from them is retired once, naming the two of its sources that went.
    (retired,) = _events([week])
    assert retired["details"]["deleted_sources"] == [tea, bike] and not _active(week)
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM entities WHERE id = %s", (entity,)).fetchone()["n"] == 0


def test_a_bulk_delete_takes_a_reflection_with_its_source(tenant: int) -> None:
    alice = UserRef(tenant, "alice")
    city = int(writes.store(alice, MemoryInput(key="city", value="Lives in Porto"), "api", enqueue=None).memory["id"])
    week = _reflection(alice, "week-2", [city])

    assert writes.delete_many(alice, [city, week], "console") == 2

    assert [e["memory_id"] for e in _events([city, week])] == [city, week]  # one event each
    assert not _active(city) and not _active(week)


def test_a_bulk_delete_is_all_or_nothing(tenant: int) -> None:
    alice, bob = UserRef(tenant, "alice"), UserRef(tenant, "bob")
    keep, gone = (
        int(writes.store(alice, MemoryInput(key=k, value=f"Note {k}"), "api", enqueue=None).memory["id"])
        for k in ("keep", "gone")
    )
    theirs = int(writes.store(bob, MemoryInput(key="pet", value="A cat"), "api", enqueue=None).memory["id"])
    writes.delete(alice, gone, "api")

    with pytest.raises(MemoryGone) as deleted_already:
        writes.delete_many(alice, [keep, gone], "console")
    with pytest.raises(MemoryGone) as another_users:
        writes.delete_many(alice, [keep, theirs], "console")

    assert (deleted_already.value.args, another_users.value.args) == ((gone,), (theirs,))
    assert _active(keep) and _active(theirs)
    assert [e["actor"] for e in _events([keep, gone, theirs])] == ["api"]  # only the single delete's
