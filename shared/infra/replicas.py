"""Reads that tolerate bounded staleness, served by Postgres streaming replicas when any are configured.

`read(fn)` runs a read-only `fn(conn)` on a replica (round-robin over the usable ones) or, when none is
usable, on the primary; a caller never sees a replica's failure. Only reads whose callers accept data a
few seconds old use it (memory search and lists, `/context`, exports, the console's lists); a session's
own turn context and every write use `shared.infra.db.connection()`, the primary.

Staleness is bounded by comparing positions in the primary's WAL, not clocks: every `_REFRESH_SECONDS` one
request samples the primary's current LSN and each replica's replayed LSN. A replica that has replayed
an LSN the primary had at monotonic time t holds everything committed by then, so it is "fresh as of t";
it serves a read only while `now - t <= ENGRAM_DATABASE_REPLICA_MAX_LAG_SECONDS`. (The usual lag query,
`now() - pg_last_xact_replay_timestamp()`, grows without bound while the primary is idle and says nothing
about a replica that lost its primary.) A replica that fails a connect or a query is skipped for
`ENGRAM_DATABASE_REPLICA_DOWN_SECONDS`, and only the refresh tries it again, so no request waits on it.

Read-your-writes: `write_lsn()` is the primary's WAL position after a write committed; a read given it as
`min_lsn` goes to a replica only once that replica has replayed it (waiting up to
`ENGRAM_DATABASE_REPLICA_LSN_WAIT_SECONDS`), else to the primary.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from shared.infra import db
from shared.infra.config import Settings, get_settings
from shared.infra.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")

# How often one request re-reads the primary's and the replicas' WAL positions.
_REFRESH_SECONDS = 0.5
# A read names an LSN it must see: how often a replica's replay position is read again while it waits.
_LSN_POLL_SECONDS = 0.02
# A replica pool with no free connection this soon is passed over for the primary (not marked down: busy).
_CHECKOUT_SECONDS = 0.5
# A replica read failing this way is retried on the primary: the replica went away, a recovery conflict
# cancelled the query, or `fn` tried to write (a replica is read-only).
_REPLICA_ERRORS: tuple[type[BaseException], ...] = (
    *db.UNAVAILABLE_ERRORS,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.SerializationFailure,
)
# A WAL position as Postgres writes it; the HTTP header that carries one is validated with the same pattern.
LSN_PATTERN = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"
_LSN_TEXT = re.compile(LSN_PATTERN)


def parse_lsn(text: str) -> int:
    """A Postgres LSN as written (`16/B374D848`) as a number; ValueError for anything else."""
    if not _LSN_TEXT.match(text):
        raise ValueError(f"not a WAL position (LSN) like 0/16B3748: {text!r}")
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def replica_urls(settings: Settings) -> list[str]:
    return [url.strip() for url in settings.database_replica_urls.split(",") if url.strip()]


@dataclass
class _Replica:
    index: int
    url: str
    pool: ConnectionPool[db.Conn]
    down_until: float = 0.0
    replayed: int = -1
    fresh_as_of: float | None = None
    # Failed since it last answered: the refresh probes it with a connection of its own.
    suspect: bool = False

    def usable(self, now: float, max_lag: float) -> bool:
        return now >= self.down_until and self.fresh_as_of is not None and now - self.fresh_as_of <= max_lag

    def mark_down(self, seconds: float, error: BaseException | str) -> None:
        if time.monotonic() >= self.down_until:
            log.warning("replica unavailable; reading elsewhere", replica=self.index, error=str(error))
        self.down_until = time.monotonic() + seconds
        self.fresh_as_of = None
        self.suspect = True


@dataclass
class _Router:
    settings: Settings
    replicas: list[_Replica]
    # (monotonic time, primary LSN then), oldest first; replaced whole (never changed in place) so readers in
    # other threads need no lock.
    samples: tuple[tuple[float, int], ...] = ()
    refreshed_at: float = float("-inf")
    refreshing: threading.Lock = field(default_factory=threading.Lock)
    turn: itertools.count[int] = field(default_factory=itertools.count)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    counts_lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, target: str, reason: str) -> None:
        with self.counts_lock:
            self.counts[(target, reason)] = self.counts.get((target, reason), 0) + 1

    # -- positions ---------------------------------------------------------------------------------------

    def refresh_if_due(self) -> None:
        if time.monotonic() - self.refreshed_at < _REFRESH_SECONDS:
            return
        if not self.refreshing.acquire(blocking=False):
            return  # another request is refreshing; this one routes on what is known
        try:
            self._refresh()
        finally:
            self.refreshed_at = time.monotonic()
            self.refreshing.release()

    def _refresh(self) -> None:
        now = time.monotonic()
        horizon = now - self.settings.database_replica_max_lag_seconds - 2 * _REFRESH_SECONDS
        kept = tuple(sample for sample in self.samples if sample[0] >= horizon)
        try:
            # Sampled before the replicas are read: a replica that has replayed it holds all of `now`.
            kept = (*kept, (now, parse_lsn(_primary_lsn())))
        except db.DatabaseUnavailable as exc:
            log.warning("could not sample the primary's WAL position", error=str(exc))
        self.samples = kept
        for replica in self.replicas:
            if now < replica.down_until:
                continue
            replayed = self._replay_position(replica, probe=replica.suspect)
            if replayed is not None:
                replica.suspect = False
                self._note_replayed(replica, replayed)

    def _note_replayed(self, replica: _Replica, replayed: int) -> None:
        replica.replayed = max(replica.replayed, replayed)
        caught_up = [at for at, lsn in self.samples if lsn <= replica.replayed]
        if caught_up:
            replica.fresh_as_of = max(caught_up[-1], replica.fresh_as_of or float("-inf"))

    def _replay_position(self, replica: _Replica, *, probe: bool) -> int | None:
        """The replica's replayed LSN; None (and the replica marked down) when it cannot be read. A replica that
        failed is probed on a connection of its own (`probe`): one connect, not a wait on a pool whose
        connections are broken and whose reconnections race requests."""
        query = "SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS lsn"
        try:
            if probe:
                with psycopg.connect(
                    replica.url,
                    row_factory=dict_row,
                    autocommit=True,
                    connect_timeout=self.settings.db_connect_timeout_seconds,
                    **db.KEEPALIVES,
                ) as conn:
                    row = conn.execute(query).fetchone()
            else:
                with replica.pool.connection(timeout=_CHECKOUT_SECONDS) as conn:
                    conn.autocommit = True
                    row = conn.execute(query).fetchone()
        except PoolTimeout:
            # Every connection busy with reads, or none can be made: one connect of its own tells which.
            return self._replay_position(replica, probe=True)
        except db.UNAVAILABLE_ERRORS as exc:
            replica.mark_down(self.settings.database_replica_down_seconds, exc)
            return None
        if row is None or not row["standby"] or row["lsn"] is None:
            # Promoted, or a URL that names a primary: its data follows no known position of ours.
            replica.mark_down(self.settings.database_replica_down_seconds, "not a streaming replica")
            return None
        return parse_lsn(row["lsn"])

    # -- routing -----------------------------------------------------------------------------------------

    def pick(self, min_lsn: int | None) -> _Replica | None:
        self.refresh_if_due()
        max_lag = self.settings.database_replica_max_lag_seconds
        usable = [r for r in self.replicas if r.usable(time.monotonic(), max_lag)]
        if not usable:
            self.count("primary", "no_fresh_replica")
            return None
        if min_lsn is not None:
            usable = self._caught_up(usable, min_lsn)
            if not usable:
                self.count("primary", "behind_write")
                return None
        return usable[next(self.turn) % len(usable)]

    def _caught_up(self, usable: list[_Replica], min_lsn: int) -> list[_Replica]:
        deadline = time.monotonic() + self.settings.database_replica_lsn_wait_seconds
        while True:
            caught = [r for r in usable if r.replayed >= min_lsn]
            if caught or time.monotonic() >= deadline:
                return caught
            for replica in usable:
                replayed = self._replay_position(replica, probe=False)
                if replayed is not None:
                    self._note_replayed(replica, replayed)
            usable = [r for r in usable if time.monotonic() >= r.down_until]
            if not any(r.replayed >= min_lsn for r in usable):
                time.sleep(min(_LSN_POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def run_on(self, replica: _Replica, fn: Callable[[db.Conn], T]) -> tuple[bool, T | None]:
        """(True, fn's result) from the replica, or (False, None) when the replica could not serve it."""
        conn = db.try_checkout(replica.pool, _CHECKOUT_SECONDS)
        if conn is None:
            self.count("primary", "replica_busy")
            return False, None
        try:
            with db.lent(replica.pool, conn), db.lending_spares(replica.pool):
                result = fn(conn)
        except _REPLICA_ERRORS as exc:
            if conn.broken or conn.closed:
                replica.mark_down(self.settings.database_replica_down_seconds, exc)
            self.count("primary", "replica_failed")
            return False, None
        self.count("replica", "fresh")
        return True, result

    def close(self) -> None:
        for replica in self.replicas:
            replica.pool.close()


_router: _Router | None = None
_router_made = False
_router_lock = threading.Lock()


def _check(conn: db.Conn) -> None:
    # As the primary pool's check: a round trip only for a connection the server has spoken on while idle.
    if conn.closed or conn.broken or db.has_unread_input(conn):
        ConnectionPool.check_connection(conn)


def _replica_pool(url: str, index: int, settings: Settings) -> ConnectionPool[db.Conn]:
    return ConnectionPool[db.Conn](
        url,
        min_size=1,
        max_size=settings.db_pool_size,
        kwargs=db.connection_kwargs(settings),
        check=_check,
        timeout=_CHECKOUT_SECONDS,
        reconnect_timeout=db.RECONNECT_TIMEOUT_SECONDS,
        open=True,
        name=f"engram-replica-{index}",
    )


def _get_router() -> _Router | None:
    global _router, _router_made
    if _router_made:
        return _router
    with _router_lock:
        if not _router_made:
            settings = get_settings()
            urls = replica_urls(settings)
            if urls:
                replicas = [_Replica(i, url, _replica_pool(url, i, settings)) for i, url in enumerate(urls)]
                _router = _Router(settings, replicas)
            _router_made = True
    return _router


def replicas_configured() -> bool:
    return _get_router() is not None


def read(fn: Callable[[db.Conn], T], *, min_lsn: int | None = None) -> T:
    """`fn(conn)` inside one read-only transaction, on a fresh replica when one is usable, else on the primary;
    `fn` may borrow a second connection of the same server (`db.spare_connection`) for reads beside its own.

    `fn` may run twice (a replica that fails mid-read is retried on the primary), so it must not write or
    have other effects. Exceptions of its own (a 404) pass through. With no replicas configured this is
    `shared.infra.db.connection()`."""
    router = _get_router()
    if router is not None:
        replica = router.pick(min_lsn)
        if replica is not None:
            served, result = router.run_on(replica, fn)
            if served:
                return result  # type: ignore[return-value]
    with db.connection() as conn, db.lending_spares():
        return fn(conn)


def write_lsn() -> str | None:
    """The primary's WAL position now, after the caller's write committed (for `X-Engram-Write-Lsn`); None
    with no replicas configured, where no read can be behind a write."""
    return _primary_lsn() if _get_router() is not None else None


def _primary_lsn() -> str:
    with db.connection(autocommit=True) as conn:
        return str(db.first(conn.execute("SELECT pg_current_wal_lsn()::text AS lsn").fetchall(), "lsn"))


def read_counts() -> dict[tuple[str, str], int]:
    """Reads routed by `read()` in this process so far, by (target, reason)."""
    router = _get_router()
    if router is None:
        return {}
    with router.counts_lock:
        return dict(router.counts)


def close_replicas() -> None:
    """Close the replica pools; the next read reads the settings again (tests; after fork)."""
    global _router, _router_made
    with _router_lock:
        if _router is not None:
            _router.close()
        _router = None
        _router_made = False
