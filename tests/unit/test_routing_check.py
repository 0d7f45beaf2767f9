"""The routing check itself (tests/support/routing.py): statements it must pass and statements it must flag,
so a check that silently passed everything would fail here."""

from __future__ import annotations

import pytest

from tests.support.routing import judge

ROUTABLE = [
    "SELECT * FROM memories WHERE tenant_id = $1 AND user_id = $2 AND namespace = $3",
    "SELECT * FROM users WHERE tenant_id = %s AND id = %s",
    "UPDATE turns SET status = 'done' WHERE id = $1 AND user_id = $2",
    "DELETE FROM memory_chunks WHERE user_id = ANY($1)",
    "SELECT m.id FROM memories m JOIN memory_chunks c ON c.memory_id = m.id AND c.user_id = m.user_id "
    "WHERE m.user_id = $1",
    "SELECT * FROM sessions WHERE (user_id, id) = ($1, $2)",
    "INSERT INTO memories (tenant_id, user_id, namespace, key, value) VALUES ($1, $2, $3, $4, $5)",
    "WITH recent AS (SELECT id FROM turns WHERE user_id = $1) SELECT * FROM recent",
    "SELECT * FROM tenants WHERE id = $1",  # a reference table: never checked
    "SELECT count(*) FROM embedding_cache WHERE content_hash = ANY($1)",
    "INSERT INTO users (tenant_id, external_id) VALUES ($1, $2) RETURNING id",  # id from the coordinator's sequence
]

FLAGGED = [
    ("SELECT * FROM memories WHERE id = $1", ["memories"]),
    ("SELECT * FROM memories WHERE tenant_id = $1", ["memories"]),
    ("SELECT * FROM users WHERE tenant_id = $1 AND external_id = $2", ["users"]),
    ("UPDATE sessions SET summary = $1 WHERE id = $2", ["sessions"]),
    ("DELETE FROM turns WHERE user_id = $1 OR id = $2", ["turns"]),  # OR does not filter every row
    ("SELECT * FROM memories m JOIN memory_chunks c ON c.memory_id = m.id WHERE m.user_id = $1", ["memory_chunks"]),
    (
        "INSERT INTO memories (tenant_id, namespace, key, value) VALUES ($1, $2, $3, $4)",
        ["memories (insert without user_id)"],
    ),
    ("SELECT * FROM sessions WHERE NOT (user_id = $1)", ["sessions"]),
    ("SELECT s.id FROM sessions s WHERE s.user_id > $1", ["sessions"]),
]


@pytest.mark.parametrize("sql", ROUTABLE)
def test_a_statement_pinned_to_one_user_routes(sql: str) -> None:
    verdict = judge(sql)
    assert verdict is None or verdict.routable, verdict


@pytest.mark.parametrize(("sql", "tables"), FLAGGED)
def test_a_statement_that_would_scan_every_shard_is_flagged(sql: str, tables: list[str]) -> None:
    verdict = judge(sql)
    assert verdict is not None and list(verdict.unpinned) == tables


def test_statements_on_no_distributed_table_are_not_judged() -> None:
    assert judge("SELECT * FROM api_keys WHERE key_hash = $1") is None
    assert judge("BEGIN") is None
    assert judge("not sql at all") is None
    assert judge("CREATE INDEX IF NOT EXISTS x ON memory_chunks USING hnsw (embedding vector_cosine_ops)") is None
    assert judge("LOCK TABLE memory_chunks IN SHARE ROW EXCLUSIVE MODE") is None
