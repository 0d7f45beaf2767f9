"""Postgres access: one connection pool per process, opened lazily.

Rows come back as dicts. Callers use `connection()` for a transaction (commit on success,
rollback on error) and keep SQL in the domain module that owns the table.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from shared.config import get_settings
from shared.services import resolve_database_url

# Every connection engram opens returns rows as dicts.
Conn = psycopg.Connection[DictRow]

_pool: ConnectionPool[Conn] | None = None
_pool_lock = threading.Lock()

# Errors that mean "the database is not reachable right now" rather than "this query is wrong".
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.errors.AdminShutdown,
    psycopg.errors.CannotConnectNow,
)


class DatabaseUnavailable(RuntimeError):
    """Postgres could not be reached; the operation wrote nothing and can be retried."""


def get_pool() -> ConnectionPool[Conn]:
    global _pool
    with _pool_lock:
        if _pool is None:
            settings = get_settings()
            _pool = ConnectionPool[Conn](
                resolve_database_url(settings),
                min_size=1,
                max_size=settings.db_pool_size,
                kwargs={"row_factory": dict_row, "autocommit": False},
                # A connection broken by a Postgres restart is detected and replaced on checkout.
                check=ConnectionPool.check_connection,
                timeout=10,
                open=True,
                name="engram",
            )
        return _pool


def close_pool() -> None:
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
            _pool = None


@contextmanager
def connection() -> Iterator[Conn]:
    """A pooled connection inside one transaction."""
    try:
        with get_pool().connection() as conn:
            yield conn
    except UNAVAILABLE_ERRORS as exc:
        raise DatabaseUnavailable(f"database unavailable: {exc}".strip()) from exc
    except TimeoutError as exc:  # the pool could not hand out a working connection in time
        raise DatabaseUnavailable(f"database unavailable: {exc}") from exc


def connect(url: str | None = None, *, autocommit: bool = False) -> Conn:
    """A standalone connection (migrations, CLI checks) outside the pool."""
    return psycopg.connect(
        url or resolve_database_url(get_settings()), row_factory=dict_row, autocommit=autocommit, connect_timeout=5
    )


def forget_pool() -> None:
    """Drop (without closing) a pool inherited across fork; the child opens its own."""
    global _pool
    _pool = None
