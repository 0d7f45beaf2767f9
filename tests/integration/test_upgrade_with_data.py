"""Upgrades keep data: a database is built by applying the migrations one at a time, writing after each the
rows a release of that schema would have stored (tests/support/upgrade_seeds); every later migration must keep
every row, and at the head the product still reads them as they were meant: memories found by meaning through
the REST API with the vectors stored long ago, session histories in order, old API keys with the access they
had, channel secrets sealed by `engram migrate` and still usable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.embedded import free_port
from shared.channels.connections import get_connection
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import get_settings
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations, available_migrations
from tests.support.processes import CeleryProcess, gateway, wait_http
from tests.support.table_rows import Rows, rows_by_key
from tests.support.upgrade_seeds import World, seeds, v0002, v0007, v0015

pytestmark = pytest.mark.integration

# Tables a migration fills from rows that were already there (0015: a transcript unit per stored message).
FILLED_BY = {15: {"memory_chunks"}}
# Tables whose rows migrations themselves write, whatever was seeded.
MIGRATION_BOOKKEEPING = {"schema_migrations"}


def test_every_migration_has_its_seed() -> None:
    missing = sorted({m.version for m in available_migrations()} - set(seeds()))
    assert not missing, (
        f"migrations {missing} have no seed: add tests/support/upgrade_seeds/v<NNNN>.py writing the rows of the "
        "tables and columns the migration adds (or saying why it adds nothing a row carries)"
    )
    assert set(seeds()) <= {m.version for m in available_migrations()}


def _assert_kept(before: Rows, after: Rows, step: str, version: int | None = None) -> None:
    for table, keys in before.items():
        if table in MIGRATION_BOOKKEEPING:
            continue
        missing = keys - after.get(table, set())
        assert not missing, f"{step} lost {len(missing)} row(s) of {table}: {sorted(missing)[:5]}"
        if table not in FILLED_BY.get(version or 0, set()):
            assert len(after[table]) == len(keys), f"{step} added rows to {table}"


@pytest.fixture(scope="module")
def upgraded(services: Any) -> Iterator[tuple[str, World, str]]:
    """(database URL, the seeded world, `engram migrate`'s output) of a database seeded at every schema."""
    import uuid

    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"upgrade_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(services.database_url, dbname=name)
    try:
        world, output = _upgrade(url)
        yield url, world, output
    finally:
        with psycopg.connect(services.database_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _upgrade(url: str) -> tuple[World, str]:
    """Each migration in turn, each followed by its seed; then `engram migrate`, as an operator runs it."""
    world = World(embedder=embedder_from_settings(get_settings()))
    by_version = seeds()
    with connect(url) as conn:
        before: Rows = {}
        for migration in available_migrations():
            applied = apply_migrations(conn, up_to=migration.version)
            assert [m.version for m in applied] == [migration.version]
            _assert_kept(before, rows_by_key(conn), f"migration {migration.version:04d}", migration.version)
            with conn.transaction():
                by_version[migration.version](conn, world)
            before = rows_by_key(conn)
    # Nothing is left to apply; the plain secrets of 0008 are sealed.
    migrated = subprocess.run(
        [sys.executable, "-m", "ops.cli", "migrate"],
        capture_output=True,
        text=True,
        env={**os.environ, "ENGRAM_DATABASE_URL": url},
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    with connect(url) as conn:
        _assert_kept(before, rows_by_key(conn), "engram migrate")
    return world, migrated.stdout


@pytest.fixture(scope="module")
def served(upgraded: tuple[str, World, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This release's gateway, as deployed (its own process), on the upgraded database."""
    url = upgraded[0]
    port = free_port()
    process: CeleryProcess = gateway(
        {**os.environ, "ENGRAM_DATABASE_URL": url}, tmp_path_factory.mktemp("upgrade-gateway"), port
    ).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(process, f"{base}/healthz", timeout=240)  # a loaded machine starts it slowly
        yield base
    finally:
        process.stop()


def _client(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_channel_secrets_are_sealed_by_migrate_and_still_read(upgraded: tuple[str, World, str]) -> None:
    url, world, output = upgraded
    assert "encrypted the plain-text secrets of 2 channel connection(s)" in output
    with connect(url) as conn:
        stored = conn.execute(
            "SELECT slug, secrets::text || secrets_encrypted::text AS stored FROM channel_connections"
        )
        for row in stored.fetchall():
            for secret in world.secrets[row["slug"]].values():
                assert secret not in row["stored"], f"{row['slug']} stores a secret in plain text"
        for slug, secrets in world.secrets.items():
            kind = "slack" if "slack" in slug or slug == "acme-sealed" else "telegram"
            connection = get_connection(conn, kind, slug)
            assert connection is not None
            assert {name: connection.secret(name) for name in secrets} == secrets


def test_memories_come_back_by_meaning_with_the_vectors_stored_before(
    upgraded: tuple[str, World, str], served: str
) -> None:
    world = upgraded[1]
    with _client(served, world.keys["first"]) as api:
        listed = api.get("/v1/users/alice/memories")
        assert listed.status_code == 200, listed.text
        active = {m["key"]: m["value"] for m in listed.json()}
        assert active == {
            "pet": v0002.PET,
            "job": v0002.JOB,
            "tea": "prefers green tea",
            "sport": "plays volleyball every Thursday evening",
            "allergy": "is allergic to peanuts",
        }
        # No word in common with the memory: only the vector stored at 0002 can find it.
        found = api.post("/v1/users/alice/memories/search", json={"query": "which dog does she own"}).json()["results"]
        assert found[0]["key"] == "pet" and "vector" in found[0]["legs"], found[0]
        # The transcript unit embedded at 0015 (and rebuilt by 0016) keeps its vector too.
        found = api.post("/v1/users/alice/memories/search", json={"query": "a family wedding"}).json()["results"]
        wedding = [r for r in found if r["message_id"] == world.ids["message_wedding"]]
        assert wedding and "vector" in wedding[0]["legs"] and wedding[0]["value"].endswith(v0015.TEXT), found
        # A word only in a memory's context (0005).
        found = api.post("/v1/users/alice/memories/search", json={"query": "Uji"}).json()["results"]
        assert [r["key"] for r in found if r["source"] == "memory"] == ["tea"]
        history = api.get(f"/v1/users/alice/memories/{world.ids['memory_job']}/history").json()
        assert [e["action"] for e in history][-1:] == ["supersede"] and history[-1]["old_value"] == v0002.OLD_JOB
        assert api.get("/v1/users/alice/entities/Biscuit").status_code == 200


def test_session_histories_read_as_they_were_written(upgraded: tuple[str, World, str], served: str) -> None:
    world = upgraded[1]
    with _client(served, world.keys["first"]) as api:
        trip = api.get("/v1/sessions/trip/messages", params={"user_id": "alice"})
        assert trip.status_code == 200, trip.text
        assert [(m["role"], m["content"]) for m in trip.json()["messages"]] == [
            ("user", "What time is it in Kyoto? I fly there in April"),
            ("assistant", "Let me check."),
            ("tool", ""),
            ("assistant", "It is 9 in Kyoto. Enjoy the temples!"),
            ("user", "How far is Nara from Kyoto?"),
            ("assistant", "About 30 minutes by train."),
        ]
        assert trip.json()["messages"][1]["tool_calls"][0]["name"] == "current_time"
        ferry = api.get("/v1/sessions/ferry/messages", params={"user_id": "bob"}).json()["messages"]
        assert [(m["name"], m["content"]) for m in ferry] == [(name, text) for _, name, text, _ in v0007.MESSAGES]
        turn = api.get(f"/v1/turns/{world.ids['turn']}").json()
        assert turn["status"] == "done" and turn["reply"] == "It is 9 in Kyoto. Enjoy the temples!"


def test_keys_keep_the_access_they_had(upgraded: tuple[str, World, str], served: str) -> None:
    world = upgraded[1]
    with _client(served, world.keys["alice_read"]) as api:
        assert api.get("/v1/users/alice/memories").status_code == 200
        assert api.get("/v1/users/bob/memories").status_code == 403
        refused = api.post("/v1/sessions/trip/turns", json={"user_id": "alice", "text": "hello"})
        assert refused.status_code == 403
    with connect(upgraded[0]) as conn:
        pending = conn.execute(
            "SELECT embedded_at FROM memories WHERE id = %s", (world.ids["memory_pending"],)
        ).fetchone()
        embedded = conn.execute("SELECT embedded_at FROM memories WHERE id = %s", (world.ids["memory_pet"],)).fetchone()
    # 0013: a memory with chunks counts as embedded; one without is still on the embeddings' work list.
    assert pending == {"embedded_at": None} and embedded is not None and embedded["embedded_at"] is not None


def test_tenant_settings_ledger_and_job_runs_read_as_they_were_written(
    upgraded: tuple[str, World, str], served: str
) -> None:
    world = upgraded[1]
    with _client(served, world.keys["first"]) as api:
        # 0006 gave the keys that predate scopes every scope but metrics: admin included.
        tenant = api.get("/v1/admin/tenant")
        assert tenant.status_code == 200, tenant.text
        # The budget of 0003 and the two model calls of 0004 (1,200 in and 40 out each).
        assert tenant.json()["monthly_token_budget"] == 5_000_000
        assert tenant.json()["tokens_used_this_month"] == 2 * (1200 + 40)
        keys = {k["name"]: (k["scopes"], k["user_id"]) for k in api.get("/v1/admin/keys").json()}
        assert keys == {
            "first": (["chat", "memory:read", "memory:write", "admin"], None),
            "alice-read": (["memory:read"], "alice"),
        }
        jobs = {job["name"]: job["last_run"] for job in api.get("/v1/admin/jobs").json()}
        assert jobs["decay"] is not None and (jobs["decay"]["period"], jobs["decay"]["status"]) == (
            "2026-03-05",
            "done",
        )
        profile = api.get("/v1/agent-profile").json()
        assert (profile["configured"], profile["name"], profile["personality_preset"]) == (True, "Ada", "professional")
