"""A question's other searches (each person's part, its time window) run on a spare pooled connection beside the
question's own search when the read lends one (`db.lending_spares`, as every API read does), and the results are
the ones the same searches give one after another on one connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import PoolTimeout

import shared.memory.service as service
from shared.infra import db
from shared.infra.db import Conn
from shared.memory.rows import Scope
from shared.memory.service import search_memories
from tests.integration.test_memory_store import make_scope, make_session

# A worker left running by an earlier test would embed the units between two searches, and the second would
# rank with a vector leg the first did not have: no worker runs here.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_shared_workers")]

QUERY = "What did Ann and Bob cook last May?"
AS_OF = datetime(2023, 10, 1, tzinfo=UTC)


def _say(conn: Conn, scope: Scope, session_id: int, name: str, text: str, day: str) -> None:
    conn.execute(
        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, name, created_at)
           VALUES (%s, %s, %s, 'user', %s, %s, %s)""",
        (scope.tenant_id, scope.user_id, session_id, text, name, f"{day}T10:00:00Z"),
    )


@pytest.fixture
def kitchen(autocommit_conn: Conn) -> Scope:
    """Ann and Bob cooking in May and in June, committed (a spare connection sees only what is committed)."""
    scope = make_scope(autocommit_conn)
    session_id = make_session(autocommit_conn, scope, "kitchen")
    for day in ("2023-05-08", "2023-06-12"):
        _say(autocommit_conn, scope, session_id, "Ann", f"I cooked risotto for the neighbours on {day}", day)
        _say(autocommit_conn, scope, session_id, "Bob", f"I cooked a lentil soup with the kids on {day}", day)
        _say(autocommit_conn, scope, session_id, "Bob", f"My dog slept all afternoon on {day}", day)
    return scope


@pytest.fixture
def spares_lent(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each search that asked for a spare connection got one."""
    lent: list[bool] = []
    real = db.spare_connection

    @contextmanager
    def recorded() -> Iterator[Conn | None]:
        with real() as spare:
            lent.append(spare is not None)
            yield spare

    monkeypatch.setattr(service.db, "spare_connection", recorded)
    return lent


def _search(scope: Scope, *, lend: bool) -> list[tuple[Any, ...]]:
    with db.connection() as conn, db.lending_spares() if lend else _nothing():
        results = search_memories(conn, scope, QUERY, limit=6, as_of=AS_OF)
    return [(r.source, r.chunk_id, r.speaker, r.value, round(r.score, 9)) for r in results]


def _grow_to_two(pool: Any) -> None:
    taken = [pool.getconn(), pool.getconn()]
    for conn in taken:
        pool.putconn(conn)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_the_searches_beside_the_question_give_what_they_give_one_after_another(
    kitchen: Scope, spares_lent: list[bool]
) -> None:
    alone = _search(kitchen, lend=False)
    assert spares_lent == [False]  # outside a read that lends spares, none is taken
    _grow_to_two(db.get_pool())  # a spare is only ever a connection that is free now, never one made for it
    beside = _search(kitchen, lend=True)
    assert spares_lent == [False, True]
    assert beside == alone
    # Both people's May lines come first: the parts and the window were searched and ranked.
    first_two = {(speaker, "2023-05-08" in value) for _, _, speaker, value, _ in beside[:2]}
    assert first_two == {("Ann", True), ("Bob", True)}


def test_with_every_connection_busy_the_question_is_searched_on_its_own_connection(
    kitchen: Scope, spares_lent: list[bool]
) -> None:
    alone = _search(kitchen, lend=False)
    pool = db.get_pool()
    held: list[Conn] = []
    try:
        with db.connection() as conn, db.lending_spares():
            while True:  # every other connection the pool has or can make is taken
                try:
                    held.append(pool.getconn(timeout=0.2))
                except PoolTimeout:
                    break
            results = search_memories(conn, kitchen, QUERY, limit=6, as_of=AS_OF)
    finally:
        for other in held:
            pool.putconn(other)
    assert spares_lent == [False, False]
    assert [(r.source, r.chunk_id, r.speaker, r.value, round(r.score, 9)) for r in results] == alone
