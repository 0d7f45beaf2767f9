"""Numbered plain-SQL migrations, applied in order.

Each file runs in its own transaction together with its row in `schema_migrations`, so a file is
either applied and recorded or not at all. A session-level advisory lock serialises concurrent
runners (several workers starting at once): the second waits, then finds nothing left to do.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from shared.infra.db import Conn

# Arbitrary constant shared by every engram process: "the migration lock".
MIGRATION_LOCK_ID = 0x656E6772616D  # "engram"

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_migrations() -> list[Migration]:
    found = []
    for entry in resources.files("migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migration files share a number: {versions}")
    return found


def apply_migrations(conn: Conn, up_to: int | None = None) -> list[Migration]:
    """Apply every pending migration (or those numbered `up_to` and below); return the ones applied by this call.

    Runs in autocommit mode (each file brings its own transaction); a transaction the caller
    left open on `conn` is committed first."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.commit()
    conn.autocommit = True
    applied_now: list[Migration] = []
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
    try:
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = _applied_versions(conn)
        for migration in available_migrations():
            if migration.version in done or (up_to is not None and migration.version > up_to):
                continue
            with conn.transaction():
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
            applied_now.append(migration)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied_now


def _applied_versions(conn: Conn) -> set[int]:
    # Rows are dicts: connections come from shared.infra.db, which always uses dict_row.
    if not _table_exists(conn):
        return set()
    rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
    return {row["version"] for row in rows}


def _table_exists(conn: Conn) -> bool:
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS present").fetchone()
    return bool(row and row["present"])


def pending_migrations(conn: Conn) -> list[Migration]:
    done = _applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done]


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer engram than this one: its code may not know the schema."""


def unknown_versions(conn: Conn) -> list[int]:
    """Migrations the database has applied that this engram does not ship (a newer release migrated it)."""
    known = {m.version for m in available_migrations()}
    return sorted(v for v in _applied_versions(conn) if v not in known)


def check_schema_known(conn: Conn) -> None:
    """Raise SchemaTooNew when the database's schema is newer than this engram's migrations."""
    unknown = unknown_versions(conn)
    if unknown:
        newest = max(m.version for m in available_migrations())
        raise SchemaTooNew(
            f"the database's schema is newer than this engram knows: migrations {unknown} are applied, and the "
            f"newest this engram ships is {newest:04d}. Run the engram release that migrated it (or a later one)"
        )
