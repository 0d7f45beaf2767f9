"""The memory-write service every surface writes through (shared/memory/writes.py), on real Postgres: a store
creates its user and queues the new memory's embedding after the commit, once; the refusals name what went
wrong (unknown user, unknown or no longer active memory); a queue that is away costs the write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from shared import db
from shared.auth import ensure_tenant
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
