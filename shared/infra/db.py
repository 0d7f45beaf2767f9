"""Postgres access: one connection pool per process, opened lazily.

Rows come back as dicts. Callers use `connection()` for a transaction (commit on success,
rollback on error) and keep SQL in the domain module that owns the table.

Outages: the pool remembers whether its last contact with Postgres failed. While it did, a
checkout waits only `OUTAGE_PROBE_SECONDS` (long enough for the pool to try one new connection)
before raising `DatabaseUnavailable`, so requests get a fast 503 instead of waiting the full pool
timeout; and a failed reconnection gives up after `RECONNECT_TIMEOUT_SECONDS` instead of backing
off for minutes, so the next request after Postgres is back connects at once.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from shared.infra.config import Settings, get_settings
from shared.infra.services import resolve_database_url

# Every connection engram opens returns rows as dicts.
Conn = psycopg.Connection[DictRow]
# A statement and its parameters, for reads sent together (`fetch_together`).
Query = tuple[str, Sequence[Any] | Mapping[str, Any]]

# A checkout waits in slices this long, so it notices an outage found meanwhile by another request.
_CHECKOUT_SLICE_SECONDS = 1.0
# Postgres known to be down: how long a checkout gives the pool to reconnect before giving up.
OUTAGE_PROBE_SECONDS = 0.5
# A reconnection attempt (with the pool's own backoff) gives up after this; the next checkout
# starts a new one right away. psycopg_pool's default (5 minutes, backoff doubling from 1 s)
# left the gateway answering 503 for most of a minute after Postgres was back.
RECONNECT_TIMEOUT_SECONDS = 2.0
# TCP keepalives: a Postgres host that vanished from the network (no reset ever comes) is noticed in about
# idle + interval × count seconds instead of the kernel's two hours. (A server that is stopped but whose
# host still answers TCP is what statement_timeout cannot catch; the gateway's request limit answers then.)
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}

_pool: ConnectionPool[Conn] | None = None
_pool_lock = threading.Lock()
# The pool a read-only piece of work (`lending_spares`) may borrow a second connection from.
_spare_pool: ContextVar[ConnectionPool[Conn] | None] = ContextVar("engram_spare_pool", default=None)
# How long a spare checkout waits: only for a connection that is free now, never for one to be made.
_SPARE_WAIT_SECONDS = 0.001

# Errors that mean "the database is not reachable right now" rather than "this query is wrong".
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.errors.AdminShutdown,
    psycopg.errors.CannotConnectNow,
    # statement_timeout (ENGRAM_DB_STATEMENT_TIMEOUT_SECONDS): the statement and its transaction are gone.
    psycopg.errors.QueryCanceled,
)


class DatabaseUnavailable(RuntimeError):
    """Postgres could not be reached; the operation wrote nothing and can be retried."""


class _Availability:
    """Whether the last contact with Postgres (a connect, a connection check, a query) failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed_at: float | None = None

    @property
    def down(self) -> bool:
        return self._failed_at is not None

    def failed(self) -> None:
        with self._lock:
            if self._failed_at is None:
                self._failed_at = time.monotonic()

    def ok(self) -> None:
        if self._failed_at is not None:
            with self._lock:
                self._failed_at = None


_availability = _Availability()


def database_down() -> bool:
    """True while this process's last contact with Postgres failed."""
    return _availability.down


class _TrackedConnection(psycopg.Connection[DictRow]):
    """A pooled connection whose connect attempts tell the pool's availability what they found."""

    @classmethod
    def connect(cls, *args: Any, **kwargs: Any) -> _TrackedConnection:
        try:
            conn = super().connect(*args, **kwargs)
        except psycopg.OperationalError:
            _availability.failed()
            raise
        _availability.ok()
        return conn


def _check(conn: Conn) -> None:
    """The pool's check on checkout, without a round trip for a connection that is plainly fine.

    An idle connection's socket has nothing to read: Postgres speaks only when asked. A server that went
    away (a restart, a crash, a terminated backend) leaves it readable (its goodbye message, or the end of
    the stream), as does a notice sent to an idle session; only then is the connection tried with a query.
    An `execute("")` on every checkout cost each `connection()` a round trip, two on every turn accept."""
    if not conn.closed and not conn.broken and not has_unread_input(conn):
        return
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        _availability.failed()
        raise


def has_unread_input(conn: Conn) -> bool:
    # poll, not select: a busy process's sockets can have descriptors above select's limit of 1024.
    poller = select.poll()
    try:
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))  # POLLIN, or POLLHUP / POLLERR, which poll reports unasked
    except (OSError, ValueError, psycopg.Error):  # no usable socket: let the full check say what is wrong
        return True


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    """What every pooled connection is opened with, to the primary or a replica: rows as dicts, one transaction
    per checkout, the connect and statement time limits and TCP keepalives."""
    kwargs: dict[str, Any] = {
        "row_factory": dict_row,
        "autocommit": False,
        "connect_timeout": settings.db_connect_timeout_seconds,
        **KEEPALIVES,
    }
    if settings.db_statement_timeout_seconds > 0:
        kwargs["options"] = f"-c statement_timeout={int(settings.db_statement_timeout_seconds * 1000)}"
    return kwargs


def get_pool() -> ConnectionPool[Conn]:
    global _pool
    with _pool_lock:
        if _pool is None:
            settings = get_settings()
            kwargs = connection_kwargs(settings)
            _pool = ConnectionPool[Conn](
                resolve_database_url(settings),
                min_size=1,
                max_size=settings.db_pool_size,
                kwargs=kwargs,
                connection_class=_TrackedConnection,
                # A connection broken by a Postgres restart is detected and replaced on checkout.
                check=_check,
                timeout=settings.db_pool_timeout_seconds,
                reconnect_timeout=RECONNECT_TIMEOUT_SECONDS,
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
    _availability.ok()


def _checkout(pool: ConnectionPool[Conn], timeout: float, patience: float) -> Conn:
    started = time.monotonic()
    deadline = started + max(timeout, patience)
    while True:
        remaining = deadline - time.monotonic()
        wait = min(OUTAGE_PROBE_SECONDS if _availability.down else _CHECKOUT_SLICE_SECONDS, max(remaining, 0.01))
        try:
            conn = pool.getconn(timeout=wait)
        except PoolTimeout as exc:
            now = time.monotonic()
            if (_availability.down and now - started >= patience) or now >= deadline:
                raise DatabaseUnavailable(
                    "database unavailable: " + ("Postgres is not answering" if _availability.down else str(exc))
                ) from exc
            continue
        except UNAVAILABLE_ERRORS as exc:
            raise DatabaseUnavailable(f"database unavailable: {exc}".strip()) from exc
        _availability.ok()  # it passed the check on checkout
        return conn


# How long work already paid for (a model reply, the record of a model call) waits for an unavailable
# Postgres before its task gives up and retries, which would pay for the call again.
PAID_WORK_PATIENCE_SECONDS = 20.0


@contextmanager
def connection(timeout: float | None = None, *, patience: float = 0.0, autocommit: bool = False) -> Iterator[Conn]:
    """A pooled connection inside one transaction.

    With Postgres down, give up after `patience` seconds (0: at once); work that is expensive to
    redo (a turn's finished reply) waits out a restart instead.

    `autocommit=True` is for work that is one statement (a statement is atomic on its own): each
    statement commits by itself, which saves the round trips of BEGIN and COMMIT.

    `timeout`: how long to wait for a free connection of a healthy pool (default
    ENGRAM_DB_POOL_TIMEOUT_SECONDS)."""
    pool = get_pool()
    conn = _checkout(pool, pool.timeout if timeout is None else timeout, patience)
    try:
        with lent(pool, conn, autocommit=autocommit):
            yield conn
    except UNAVAILABLE_ERRORS as exc:
        if conn.broken or conn.closed:  # the server went away, not just this statement (a deadlock, a timeout)
            _availability.failed()
        raise DatabaseUnavailable(f"database unavailable: {exc}".strip()) from exc


def try_checkout(pool: ConnectionPool[Conn], timeout: float) -> Conn | None:
    """A connection of `pool` when one is free within `timeout` seconds, else None."""
    try:
        return pool.getconn(timeout=timeout)
    except PoolTimeout:
        return None


@contextmanager
def lent(pool: ConnectionPool[Conn], conn: Conn, *, autocommit: bool = False) -> Iterator[Conn]:
    """`conn`, checked out of `pool`, in one transaction (commit on success, roll back on error), then given
    back to `pool` whatever happened (the pool discards a broken connection). Every borrower of a pooled
    connection goes through here: the primary's `connection`, `spare_connection`, a replica's reads."""
    try:
        # Set on every checkout, whatever the previous borrower left (a lock watcher turns autocommit on): a
        # caller that asked for one transaction must not have each write commit alone and its row locks
        # released at once. No round trip (the connection is idle). Not in a pool `reset` callback: with one,
        # psycopg_pool hands every returned connection to a worker thread (a thread switch per checkout, and
        # a burst of requests waits for connections that are free but not yet back).
        conn.autocommit = autocommit
        with conn:  # a pooled connection is not closed here
            yield conn
    finally:
        pool.putconn(conn)


@contextmanager
def lending_spares(pool: ConnectionPool[Conn] | None = None) -> Iterator[None]:
    """Inside, `spare_connection` may lend a second connection of `pool` (default: the primary's). Only for work
    that does not write: a spare does not see the caller's transaction."""
    token = _spare_pool.set(pool or get_pool())
    try:
        yield
    finally:
        _spare_pool.reset(token)


@contextmanager
def spare_connection() -> Iterator[Conn | None]:
    """A second connection, in a transaction of its own, for reads that can run beside the caller's: from the
    pool of the surrounding `lending_spares` when one is free at once. None outside `lending_spares` or when
    every connection is busy (then the caller runs its reads on its own connection, one after another). On a
    busy pool a miss is the right answer: a request does not make another wait for its extra speed."""
    pool = _spare_pool.get()
    conn = None if pool is None else try_checkout(pool, _SPARE_WAIT_SECONDS)
    if pool is None or conn is None:
        yield None
        return
    with lent(pool, conn):
        yield conn


def connect(url: str | None = None, *, autocommit: bool = False) -> Conn:
    """A standalone connection (migrations, CLI checks) outside the pool."""
    return psycopg.connect(
        url or resolve_database_url(get_settings()),
        row_factory=dict_row,
        autocommit=autocommit,
        connect_timeout=get_settings().db_connect_timeout_seconds,
        **KEEPALIVES,
    )


def forget_pool() -> None:
    """Drop (without closing) a pool inherited across fork; the child opens its own."""
    global _pool
    _pool = None
    _availability.ok()


def warm_pool(timeout: float | None = None) -> bool:
    """Keep every connection the pool may use open, and wait until they are. True when they all are.

    A pool that starts at one connection grows by one at a time, each a new Postgres backend (tens
    of milliseconds on a busy machine), and only while requests already wait for one: a burst of
    concurrent requests to a fresh or quiet gateway waited in line for the growth (turn accept p99
    of 300-700 ms against 40 ms for /healthz in ops/bench/turns.py). The gateway calls this at start.
    Best effort: with Postgres away the pool keeps trying in the background and requests answer 503
    as before."""
    pool = get_pool()
    timeout = pool.timeout if timeout is None else timeout
    # resize() opens (new minimum - old minimum) connections whatever the pool holds already: a pool that
    # had grown under waits before this call ended above max_size (11 for a pool of 10). So the minimum is
    # raised only by the connections missing; ones the pool grew may close again after max_idle.
    missing = max(0, pool.max_size - pool.get_stats()["pool_size"])
    pool.resize(min_size=min(pool.max_size, pool.min_size + missing), max_size=pool.max_size)
    try:
        pool.wait(timeout=timeout)
    except PoolTimeout:
        return False
    return True


def fetch_together(conn: Conn, queries: Mapping[str, Query]) -> dict[str, list[DictRow]]:
    """Run independent reads in one round trip (psycopg's pipeline mode) and return each one's rows by name.

    Sent one after another, every read waits for the server before the next is sent: a turn's context is a
    dozen small reads, and on a busy machine each wait is a trip through the scheduler for both processes.
    The reads run in `conn`'s transaction, in the order given, each with its own snapshot as any statement
    of a read-committed transaction."""
    with conn.pipeline():
        cursors = {name: conn.execute(sql, params) for name, (sql, params) in queries.items()}
    return {name: cursor.fetchall() for name, cursor in cursors.items()}


# Candidates a claim looks at: more than it takes, so rows another transaction holds are skipped over.
CLAIM_SCAN_FACTOR = 4


def claim_unlocked(conn: Conn, *, table: str, fields: str, pending: str, lock: str, limit: int) -> list[DictRow]:
    """Up to `limit` rows of `table` (its `fields`, by id) matching the SQL condition `pending` (alias m), the
    oldest first, that no other transaction holds: each is taken with a transaction-scoped advisory lock on
    "<lock>:<id>", so concurrent claimers skip each other's rows without row locks (a reader never waits) and
    the locks go with the transaction. The outer LIMIT stops the scan once enough locks are taken."""
    return conn.execute(
        f"""SELECT {fields} FROM {table} WHERE id IN (
                SELECT p.id FROM (
                    SELECT id FROM {table} m WHERE {pending} ORDER BY id LIMIT %(scan)s) p
                 WHERE pg_try_advisory_xact_lock(hashtextextended(%(lock)s::text || ':' || p.id, 0))
                 LIMIT %(limit)s)
            ORDER BY id""",
        {"scan": limit * CLAIM_SCAN_FACTOR, "limit": limit, "lock": lock},
    ).fetchall()


def any_pending(conn: Conn, *, table: str, pending: str) -> bool:
    """Whether a row of `table` matches `pending` (alias m), as `claim_unlocked` would look for it."""
    return bool(
        first(conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table} m WHERE {pending}) AS found").fetchall(), "found")
    )


def first(rows: Sequence[DictRow], column: str | None = None) -> Any:
    """A single-row read's row (or that row's `column`), None when it found nothing."""
    if not rows:
        return None
    return rows[0] if column is None else rows[0][column]
