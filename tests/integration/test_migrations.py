"""Migrations: ordered, recorded, safe to run twice and from several processes at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psycopg
import pytest

from ops.process_commands import gateway_argv
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations, available_migrations, pending_migrations

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
    from shared.infra import migrate

    good = available_migrations()
    broken = migrate.Migration(9999, "broken", "CREATE TABLE half_done (id int); SELECT no_such_function();")
    monkeypatch.setattr(migrate, "available_migrations", lambda: [*good, broken])
    with connect(fresh_db_url) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            apply_migrations(conn)
        assert conn.execute("SELECT to_regclass('half_done') AS t").fetchone() == {"t": None}
        versions = [r["version"] for r in conn.execute("SELECT version FROM schema_migrations")]
        assert 9999 not in versions and len(versions) == len(good)


def test_an_upgrade_rewrites_what_units_embed_and_keeps_their_vectors(
    fresh_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0016 changes what a transcript unit's vector is made of; a database with units embedded under 0015 keeps
    them searchable by meaning (no re-embedding of every message) and rebuilds later edits the new way."""
    from shared.infra import migrate

    every = available_migrations()
    monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in every if m.version <= 15])
    with connect(fresh_db_url) as conn:
        apply_migrations(conn)
        tenant = conn.execute("INSERT INTO tenants (name) VALUES ('t') RETURNING id").fetchone()
        assert tenant is not None
        user = conn.execute(
            "INSERT INTO users (tenant_id, external_id) VALUES (%s, 'u') RETURNING id", (tenant["id"],)
        ).fetchone()
        assert user is not None
        ids = (tenant["id"], user["id"])
        session = conn.execute(
            "INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, 's') RETURNING id", ids
        ).fetchone()
        assert session is not None
        for content in ("Have you ever been to Iceland?", "Yes, twice"):
            conn.execute(
                """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
                   VALUES (%s, %s, %s, 'user', %s)""",
                (*ids, session["id"], content),
            )
        conn.execute("UPDATE memory_chunks SET embedding = '[0.1,0.2,0.3]', embedded_at = now()")
        before = conn.execute("SELECT text FROM memory_chunks ORDER BY message_id").fetchall()
        assert before[1]["text"] == "user: Yes, twice\n\nContext:\nuser: Have you ever been to Iceland?"

    monkeypatch.setattr(migrate, "available_migrations", lambda: every)
    with connect(fresh_db_url) as conn:
        assert 16 in [m.version for m in apply_migrations(conn)]
        after = conn.execute(
            "SELECT message_id, text, embedding::text AS v, embedded_at FROM memory_chunks ORDER BY message_id"
        ).fetchall()
        assert [row["text"] for row in after] == [
            "user: Have you ever been to Iceland?",
            "user: Yes, twice\n\nContext: user: Have you ever been to Iceland?",
        ]
        assert all(row["v"] == "[0.1,0.2,0.3]" and row["embedded_at"] is not None for row in after)
        # The new text is its hash: rebuilding an unchanged message keeps its vector.
        conn.execute("UPDATE session_messages SET content = content WHERE id = %s", (after[1]["message_id"],))
        kept = conn.execute(
            "SELECT embedding::text AS v FROM memory_chunks WHERE message_id = %s", (after[1]["message_id"],)
        ).fetchone()
        assert kept == {"v": "[0.1,0.2,0.3]"}


def _engram(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENGRAM_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_migrate_check_lists_what_is_pending_and_applies_nothing(fresh_db_url: str) -> None:
    checked = _engram("migrate", "--check", database_url=fresh_db_url)
    names = [f"{m.version:04d}_{m.name}" for m in available_migrations()]
    assert checked.returncode == 1 and f"{len(names)} migration(s) pending" in checked.stdout
    assert all(name in checked.stdout for name in names)
    with connect(fresh_db_url) as conn:
        assert len(pending_migrations(conn)) == len(names)  # nothing applied
    assert _engram("migrate", database_url=fresh_db_url).returncode == 0
    done = _engram("migrate", "--check", database_url=fresh_db_url)
    assert done.returncode == 0 and "up to date" in done.stdout


def test_a_schema_newer_than_this_engram_is_refused_by_migrate_and_the_gateway(fresh_db_url: str) -> None:
    with connect(fresh_db_url) as conn:
        apply_migrations(conn)
        conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x')")
    for args in (("migrate", "--check"), ("migrate",)):
        refused = _engram(*args, database_url=fresh_db_url)
        assert refused.returncode == 2 and "newer than this engram knows" in refused.stderr and "9999" in refused.stderr
    # The gateway does not start on it: serving would read and write a schema its code may not know.
    gateway = subprocess.run(
        gateway_argv("127.0.0.1", 0),
        capture_output=True,
        text=True,
        env={**os.environ, "ENGRAM_DATABASE_URL": fresh_db_url},
        timeout=180,
    )
    assert gateway.returncode != 0 and "newer than this engram knows" in gateway.stderr
