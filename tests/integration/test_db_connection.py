"""`db.connection()`: one transaction, whatever the connection's previous borrower did with it; a checkout
that costs nothing when the connection is fine and replaces it when its server process is gone."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest
from psycopg.pq import TransactionStatus

from shared.infra import db
from shared.infra.config import get_settings
from tests.support.wire import wire_messages

pytestmark = pytest.mark.integration


def test_a_connection_returned_in_autocommit_comes_back_in_a_transaction(clean_state: object) -> None:
    # A borrower turns autocommit on (a lock watcher did) and gives the connection back like that.
    with db.connection() as careless:
        careless.autocommit = True
        careless.execute("SELECT 1")
        poisoned_pid = careless.info.backend_pid
    # Take every connection the pool may hand out, so the one above is among them.
    with ExitStack() as stack:
        borrowed = [stack.enter_context(db.connection()) for _ in range(get_settings().db_pool_size)]
        again = [conn for conn in borrowed if conn.info.backend_pid == poisoned_pid]
        assert again, "the pool did not hand the connection out again"
        conn = again[0]
        assert not conn.autocommit
        conn.execute("SELECT 1")
        # Still inside the block's transaction: a row lock taken here would be held until the block ends.
        assert conn.info.transaction_status == TransactionStatus.INTRANS


def test_checking_out_a_healthy_connection_costs_no_round_trip(clean_state: object) -> None:
    size = get_settings().db_pool_size
    with ExitStack() as traces:
        with ExitStack() as borrowed:
            conns = [borrowed.enter_context(db.connection()) for _ in range(size)]
            for conn in conns:
                conn.execute("SELECT 1")
                conn.commit()
            # Traced from here until after the second round of checkouts (the pool keeps the traces on).
            sent = [traces.enter_context(wire_messages(conn)) for conn in conns]
        with ExitStack() as again:
            for _ in range(size):
                again.enter_context(db.connection())
    assert sum(sum(counts.values()) for counts in sent) == 0, sent


def test_a_connection_whose_server_process_went_away_is_replaced_on_checkout(clean_state: object) -> None:
    with db.connection() as conn:
        conn.execute("SELECT 1")
        victim = conn.info.backend_pid
    with db.connect(autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
        gone = threading.Event()
        for _ in range(1000):  # the backend exits (and its socket closes) soon after the signal
            if admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (victim,)).fetchone() is None:
                gone.set()
                break
            gone.wait(0.01)
        assert gone.is_set(), "the terminated backend did not exit"
    # Every connection the pool hands out works; the dead one is not among them.
    with ExitStack() as stack:
        borrowed = [stack.enter_context(db.connection()) for _ in range(get_settings().db_pool_size)]
        assert [conn.execute("SELECT 1 AS one").fetchone() for conn in borrowed] == [{"one": 1}] * len(borrowed)
        assert victim not in {conn.info.backend_pid for conn in borrowed}
    assert not db.database_down()


def test_warming_a_pool_that_already_grew_opens_no_more_than_its_size(clean_state: object) -> None:
    size = get_settings().db_pool_size
    db.close_pool()  # a fresh pool: one connection, growing by one whenever a checkout has to wait
    try:
        with db.connection(), db.connection():
            pass
        grown = db.get_pool().get_stats()["pool_size"]
        assert 1 < grown < size
        assert db.warm_pool()
        assert db.get_pool().get_stats()["pool_size"] == size
    finally:
        db.close_pool()  # the next test gets an ordinary pool
