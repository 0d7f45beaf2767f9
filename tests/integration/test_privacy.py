"""Export and erasure checked against the live schema, row by row.

A marker string is planted in everything one user says and stores. Before erasure, every row of any
table whose text holds the marker must be in that user's export; after erasure, no column of any
table may hold it, nothing of hers is left in any table that references users, and another user's
rows are untouched. The tables are enumerated from the catalog, so a new table is checked without
anyone remembering to add it here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest
from psycopg.types.json import Jsonb

from shared.access.keys import create_api_key
from shared.embeddings import content_hash
from shared.infra import db
from shared.infra.events import stream_key
from shared.infra.redis_client import get_redis
from shared.memory.userdata import NON_USER_TABLES, USER_TABLES
from tests.conftest import CeleryStack, TestServices, wait_turn
from tests.integration.test_memory_api import create, wait_for_chunks
from tests.integration.test_turns import post_turn

pytestmark = pytest.mark.integration

MARK = "quokka7731zanzibar"
TEXT_TYPES = ("text", "character varying", "jsonb", "json", "ARRAY")


def public_tables(conn: db.Conn) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row["tablename"] for row in rows}


def test_every_table_is_classified_for_export_and_erasure(clean_state: TestServices) -> None:
    with db.connection() as conn:
        tables = public_tables(conn)
    user_tables = {table.name for table in USER_TABLES}
    assert not user_tables & set(NON_USER_TABLES)
    unclassified = tables - user_tables - set(NON_USER_TABLES)
    assert not unclassified, f"classify these tables in shared/memory/userdata.py: {sorted(unclassified)}"
    assert not (user_tables | set(NON_USER_TABLES)) - tables, "userdata.py names tables the schema lacks"


def rows_holding(conn: db.Conn, needle: str) -> dict[str, set[Any]]:
    """(table → ids) of every row with `needle` in any text, JSON or array column, across the schema."""
    columns = conn.execute(
        """SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = 'public' AND data_type = ANY(%s) ORDER BY table_name, ordinal_position""",
        (list(TEXT_TYPES),),
    ).fetchall()
    by_table: dict[str, list[str]] = {}
    for column in columns:
        by_table.setdefault(column["table_name"], []).append(column["column_name"])
    found: dict[str, set[Any]] = {}
    for table, names in by_table.items():
        has_id = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
            "AND column_name = 'id'",
            (table,),
        ).fetchone()
        key = "id" if has_id else "ctid::text"
        where = " OR ".join(f'"{name}"::text LIKE %(needle)s' for name in names)
        hits = conn.execute(f"SELECT {key} AS k FROM {table} WHERE {where}", {"needle": f"%{needle}%"}).fetchall()
        if hits:
            found[table] = {row["k"] for row in hits}
    return found


def rows_referencing_user(conn: db.Conn, user_id: int) -> Counter[str]:
    """Rows in any table with a foreign key to users(id) that point at `user_id`."""
    references = conn.execute(
        """SELECT cl.relname AS table_name, att.attname AS column_name
             FROM pg_constraint con
             JOIN pg_class cl ON cl.oid = con.conrelid
             JOIN pg_attribute att ON att.attrelid = con.conrelid AND att.attnum = ANY(con.conkey)
            WHERE con.contype = 'f' AND con.confrelid = 'users'::regclass""",
    ).fetchall()
    counts: Counter[str] = Counter()
    for ref in references:
        row = conn.execute(
            f'SELECT count(*) AS n FROM {ref["table_name"]} WHERE "{ref["column_name"]}" = %s', (user_id,)
        ).fetchone()
        assert row is not None
        counts[ref["table_name"]] += row["n"]
    counts["users"] = conn.execute("SELECT count(*) AS n FROM users WHERE id = %s", (user_id,)).fetchone()["n"]  # type: ignore[index]
    return counts


def table_counts(conn: db.Conn) -> dict[str, int]:
    return {
        table: conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]  # type: ignore[index]
        for table in sorted(public_tables(conn))
    }


def populate(api: httpx.Client, user: str, mark: str) -> int:
    """Touch every table that holds user data for `user`; returns the turn id."""
    turn_id = post_turn(api, f"s-{user}", f"Hi, I live in Lisbon and my code word is {mark}", user=user).json()[
        "turn_id"
    ]
    assert wait_turn(api, turn_id)["status"] == "done"
    friend = create(api, user, key="friend", value=f"Caroline Smith is my friend, code {mark}")
    assert friend.status_code == 201, friend.text
    memory_id = friend.json()["memory"]["id"]
    corrected = api.patch(f"/v1/users/{user}/memories/{memory_id}", json={"value": f"Caroline Smith, code {mark}!"})
    assert corrected.status_code == 201 and corrected.json()["action"] == "superseded", corrected.text
    memory_id = corrected.json()["memory"]["id"]
    shared_text = create(api, user, key="city", value="Lisbon")  # the same text for both users
    assert shared_text.status_code == 201, shared_text.text
    wait_for_chunks(memory_id)
    wait_for_chunks(shared_text.json()["memory"]["id"])
    with db.connection() as conn:
        user_row = conn.execute("SELECT id, tenant_id FROM users WHERE external_id = %s", (user,)).fetchone()
        assert user_row is not None
        session = conn.execute("SELECT id FROM sessions WHERE user_id = %s", (user_row["id"],)).fetchone()
        assert session is not None
        # Written by compaction and by the channels; planted directly so every table has a row.
        conn.execute(
            "INSERT INTO documents (tenant_id, user_id, session_id, title, content) VALUES (%s, %s, %s, %s, %s)",
            (user_row["tenant_id"], user_row["id"], session["id"], "tool output", f"a long result {mark}"),
        )
        conn.execute(
            "INSERT INTO inbound_events (tenant_id, channel, external_id, turn_id, payload) "
            "VALUES (%s, %s, %s, %s, %s)",
            (user_row["tenant_id"], "slack", f"ev-{user}", turn_id, Jsonb({"text": f"hello {mark}"})),
        )
        connection = conn.execute(
            "INSERT INTO channel_connections (tenant_id, kind, slug) VALUES (%s, 'telegram', %s) RETURNING id",
            (user_row["tenant_id"], f"bot-{user}"),
        ).fetchone()
        assert connection is not None
        conn.execute(
            "INSERT INTO channel_identities (tenant_id, connection_id, platform_user_id, user_id, display_name) "
            "VALUES (%s, %s, %s, %s, %s)",
            (user_row["tenant_id"], connection["id"], f"tg-{user}", user_row["id"], f"{user} {mark}"),
        )
        command = conn.execute(
            "INSERT INTO inbound_events (tenant_id, channel, connection_id, user_id, external_id, payload) "
            "VALUES (%s, 'telegram', %s, %s, %s, %s) RETURNING id",
            (user_row["tenant_id"], connection["id"], user_row["id"], f"up-{user}", Jsonb({"text": f"/memory {mark}"})),
        ).fetchone()
        assert command is not None
        conn.execute(
            "INSERT INTO channel_deliveries (tenant_id, connection_id, user_id, inbound_event_id, target, text) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (user_row["tenant_id"], connection["id"], user_row["id"], command["id"], Jsonb({"chat_id": 1}), mark),
        )
        create_api_key(conn, user_row["tenant_id"], name=f"{user}'s app {mark}", user_external_id=user)
    return int(turn_id)


def test_export_holds_every_row_and_erasure_leaves_nothing(api: httpx.Client, workers: CeleryStack) -> None:
    alice_turn = populate(api, "alice", MARK)
    populate(api, "bob", "wombat5512")

    with db.connection() as conn:
        alice = conn.execute("SELECT id, tenant_id FROM users WHERE external_id = 'alice'").fetchone()
        assert alice is not None
        alice_id = alice["id"]
        bob_id = conn.execute("SELECT id FROM users WHERE external_id = 'bob'").fetchone()["id"]  # type: ignore[index]
        marked = rows_holding(conn, MARK)
        user_rows = {
            table.name: conn.execute(
                f"SELECT count(*) AS n FROM {table.name} WHERE {table.predicate}",
                {"t": alice["tenant_id"], "u": alice_id, "ext": "alice"},
            ).fetchone()["n"]  # type: ignore[index]
            for table in USER_TABLES
        }
        alice_hashes = {
            row["content_hash"]
            for row in conn.execute("SELECT content_hash FROM memory_chunks WHERE user_id = %s", (alice_id,)).fetchall()
        }
        bob_hashes = {
            row["content_hash"]
            for row in conn.execute("SELECT content_hash FROM memory_chunks WHERE user_id = %s", (bob_id,)).fetchall()
        }
        bob_before = rows_referencing_user(conn, bob_id)
        counts_before = table_counts(conn)

    # Every table that can hold user data got a row of alice's, so nothing below passes vacuously.
    assert all(n > 0 for n in user_rows.values()), user_rows
    assert set(marked) >= {"session_messages", "turns", "memories", "memory_events", "memory_chunks", "documents"}
    shared_hashes = alice_hashes & bob_hashes
    assert shared_hashes == {content_hash("city: Lisbon")}
    assert get_redis().exists(stream_key(alice_turn))

    export = api.get("/v1/users/alice/export")
    assert export.status_code == 200
    body = export.json()
    sections = {"users": "user", "session_messages": "messages"}
    for table, ids in marked.items():
        section = body[sections.get(table, table)]
        exported_ids = {section["id"]} if isinstance(section, dict) else {row["id"] for row in section}
        assert ids <= exported_ids, f"{table}: rows {sorted(ids - exported_ids)} hold alice's text but are not exported"
    assert body["api_keys"] and all("key_hash" not in row for row in body["api_keys"])
    assert len(body["memory_chunks"]) == user_rows["memory_chunks"]
    assert all("embedding" not in row for row in body["memory_chunks"])
    assert len(body["llm_calls"]) == user_rows["llm_calls"] and len(body["turns"]) == user_rows["turns"]
    assert [e["canonical_name"] for e in body["entities"] if e["memory_ids"]], "entities lost their memory links"

    erased = api.delete("/v1/users/alice")
    assert erased.status_code == 200, erased.text
    counts = erased.json()["erased"]
    assert {name: counts[name] for name in user_rows} == user_rows
    assert counts["embedding_cache"] == len(alice_hashes - bob_hashes)

    with db.connection() as conn:
        assert rows_holding(conn, MARK) == {}
        left = rows_referencing_user(conn, alice_id)
        assert +left == Counter(), f"rows of the erased user remain: {dict(+left)}"
        cached = {
            row["content_hash"]
            for row in conn.execute(
                "SELECT content_hash FROM embedding_cache WHERE content_hash = ANY(%s)", (list(alice_hashes),)
            ).fetchall()
        }
        assert cached == shared_hashes  # bob's copy of the shared text stays cached
        assert rows_referencing_user(conn, bob_id) == bob_before
        counts_after = table_counts(conn)
    expected = {table: n - counts.get(table, 0) for table, n in counts_before.items()}
    assert counts_after == expected
    assert not get_redis().exists(stream_key(alice_turn))
    assert api.get("/v1/users/alice/export").status_code == 404
    assert api.get("/v1/users/bob/export").json()["memories"]
