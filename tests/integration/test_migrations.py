"""Migrations: ordered, recorded, safe to run twice and from several processes at once."""

from __future__ import annotations

import threading

import psycopg
import pytest

from shared.db import connect
from shared.migrate import apply_migrations, available_migrations, pending_migrations

pytestmark = pytest.mark.integration


def test_migrations_apply_once_in_order(fresh_db_url: str) -> None:
    with connect(fresh_db_url) as conn:
        assert [m.version for m in pending_migrations(conn)] == [m.version for m in available_migrations()]
        first = apply_migrations(conn)
        second = apply_migrations(conn)
        assert [m.version for m in first] == sorted(m.version for m in available_migrations())
        assert second == [] and pending_migrations(conn) == []
        recorded = conn.execute("SELECT version, checksum FROM schema_migrations ORDER BY version").fetchall()
        assert [(r["version"], r["checksum"]) for r in recorded] == [(m.version, m.checksum) for m in first]
        vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert vector is not None
        tables = {r["tablename"] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname='public'")}
        assert {"tenants", "api_keys", "users", "sessions", "session_messages", "turns", "inbound_events"} <= tables


def test_concurrent_runners_apply_each_migration_once(fresh_db_url: str) -> None:
    applied: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with connect(fresh_db_url) as conn:
                barrier.wait()
                applied.append([m.version for m in apply_migrations(conn)])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(v for versions in applied for v in versions) == [m.version for m in available_migrations()]
    with connect(fresh_db_url) as conn:
        count = conn.execute("SELECT count(*) AS n FROM schema_migrations").fetchone()
        assert count is not None and count["n"] == len(available_migrations())


def test_a_failing_migration_leaves_no_trace(fresh_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared import migrate

    good = available_migrations()
    broken = migrate.Migration(9999, "broken", "CREATE TABLE half_done (id int); SELECT no_such_function();")
    monkeypatch.setattr(migrate, "available_migrations", lambda: [*good, broken])
    with connect(fresh_db_url) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            apply_migrations(conn)
        assert conn.execute("SELECT to_regclass('half_done') AS t").fetchone() == {"t": None}
        versions = [r["version"] for r in conn.execute("SELECT version FROM schema_migrations")]
        assert 9999 not in versions and len(versions) == len(good)
