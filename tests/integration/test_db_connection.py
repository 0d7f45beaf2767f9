"""`db.connection()` is one transaction, whatever the connection's previous borrower did with it."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from psycopg.pq import TransactionStatus

from shared import db
from shared.config import get_settings

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
