"""Bytes on disk per row and per user, the inputs of the sharding plan (docs/operations/sharding.md), for users
loaded with SQL into an embedded Postgres with the product's HNSW index."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ops.bench.harness import BenchRun, bench_parser, emit, outline, run_main
from shared.infra.migrate import apply_migrations

SESSION_MESSAGES = 40
MEMORY_WORDS, USER_WORDS, REPLY_WORDS = 12, 20, 60  # words of a memory, a user message, a reply
_WORDS = "(SELECT array_agg('w' || md5(i::text)::varchar(6)) FROM generate_series(1, 2000) i)"


def _text(words: int) -> str:
    """SQL for a text of about `words` words from the vocabulary (`vocab` must be in scope)."""
    return (
        # `i * 0` ties the aggregate to this subquery (an aggregate of outer columns only belongs to the outer query).
        f"(SELECT string_agg(vocab[1 + floor(random() * 2000)::int + i * 0], ' ') FROM generate_series(1, {words}) i "
        "WHERE g IS NOT NULL)"
    )


def _vector(dims: int) -> str:
    return f"(SELECT array_agg(random() - 0.5)::vector({dims}) FROM generate_series(1, {dims}) WHERE g IS NOT NULL)"


def load(conn: psycopg.Connection[dict[str, Any]], args: argparse.Namespace) -> None:
    d = args.dims
    conn.execute("INSERT INTO tenants (name) VALUES ('sizes')")
    conn.execute(
        "INSERT INTO users (tenant_id, external_id, display_name) "
        "SELECT 1, 'user-' || g, 'User ' || g FROM generate_series(1, %s) g",
        (args.users,),
    )
    conn.execute(f"ALTER TABLE memory_chunks ALTER COLUMN embedding TYPE vector({d}) USING NULL")
    conn.execute("CREATE INDEX memory_chunks_embedding_hnsw ON memory_chunks USING hnsw (embedding vector_cosine_ops)")
    sessions_per_user = max(1, args.messages // SESSION_MESSAGES)
    conn.execute(
        """INSERT INTO sessions (tenant_id, user_id, session_key, summary)
           SELECT 1, u.id, 's' || g, NULL FROM users u, generate_series(1, %s) g""",
        (sessions_per_user,),
    )
    # A chat turn per (user message, reply) pair, then its messages; their units are built once analysed.
    conn.execute(
        """INSERT INTO turns (tenant_id, user_id, session_id, status, reply, usage, timings, started_at, finished_at)
           SELECT 1, s.user_id, s.id, 'done', 'ok', '{"llm_calls": 1, "input_tokens": 900}',
                  '{"llm_ms": 800, "run_ms": 900}', now(), now()
             FROM sessions s, generate_series(1, %s) g""",
        (SESSION_MESSAGES // 2,),
    )
    conn.execute("ALTER TABLE session_messages DISABLE TRIGGER session_messages_transcript_units")
    conn.execute(
        f"""INSERT INTO session_messages (tenant_id, user_id, session_id, turn_id, role, content, token_estimate)
            SELECT 1, t.user_id, t.session_id, t.id, r.role,
                   CASE WHEN r.role = 'user' THEN {_text(USER_WORDS)} ELSE {_text(REPLY_WORDS)} END, 60
              FROM (SELECT {_WORDS} AS vocab) v, turns t, (VALUES (1, 'user'), (2, 'assistant')) r(n, role),
                   LATERAL (SELECT t.id AS g) gg(g)
             ORDER BY t.id, r.n"""
    )
    conn.execute("ALTER TABLE session_messages ENABLE TRIGGER session_messages_transcript_units")
    conn.execute("ANALYZE session_messages")
    conn.execute("SELECT engram_build_transcript_unit(id) FROM session_messages ORDER BY id")
    conn.execute(
        """INSERT INTO llm_calls (tenant_id, user_id, session_id, turn_id, purpose, provider, model,
                                  input_tokens, output_tokens, duration_ms)
           SELECT 1, user_id, session_id, id, 'chat', 'anthropic', 'claude', 900, 60, 800 FROM turns"""
    )
    conn.execute(
        f"""INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, tags, metadata, embedded_at,
                                  content_key)
            SELECT 1, u.id, 'tacit/facts', 'fact-' || g, {_text(MEMORY_WORDS)}, 'fact', ARRAY['topic'],
                   jsonb_build_object('reinforced_count', 1, 'first_observed', now()), now(),
                   sha256(convert_to(u.id || ':' || g, 'UTF8'))
              FROM (SELECT {_WORDS} AS vocab) v, users u, generate_series(1, %s) g""",
        (args.memories,),
    )
    conn.execute(
        f"""INSERT INTO memory_chunks (tenant_id, user_id, memory_id, text, end_char, content_hash, embedding)
            SELECT m.tenant_id, m.user_id, m.id, 'tacit/facts fact: ' || m.value, length(m.value),
                   encode(sha256(convert_to(m.value, 'UTF8')), 'hex'), {_vector(d)}
              FROM memories m, LATERAL (SELECT m.id AS g) gg(g)"""
    )
    conn.execute(
        f"UPDATE memory_chunks c SET embedding = {_vector(d)}, embedded_at = now() "
        "FROM (SELECT id AS g FROM memory_chunks WHERE message_id IS NOT NULL) gg WHERE c.id = gg.g"
    )
    conn.execute(
        """INSERT INTO memory_events (tenant_id, user_id, memory_id, action, namespace, key, new_value, actor)
           SELECT tenant_id, user_id, id, 'add', namespace, key, value, 'extraction' FROM memories"""
    )
    conn.execute(
        """INSERT INTO entities (tenant_id, user_id, canonical_name, normalized_name, entity_type, mention_count)
           SELECT 1, u.id, 'Person ' || g, 'person ' || g, 'person', 3 FROM users u, generate_series(1, %s) g""",
        (args.entities,),
    )
    conn.execute(
        """INSERT INTO memory_entities (memory_id, entity_id)
           SELECT m.id, e.id FROM memories m
             JOIN entities e ON e.user_id = m.user_id
              AND e.normalized_name = 'person ' || (1 + m.id %% %s)""",
        (args.entities,),
    )


_SIZES = """
    SELECT c.relname AS name, pg_total_relation_size(c.oid) AS total, pg_relation_size(c.oid) AS heap,
           pg_indexes_size(c.oid) AS indexes
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY total DESC"""


def measure(conn: psycopg.Connection[dict[str, Any]], users: int) -> dict[str, Any]:
    tables = []
    for row in conn.execute(_SIZES).fetchall():
        counted = conn.execute(f'SELECT count(*) AS n FROM "{row["name"]}"').fetchone()
        rows = int(counted["n"]) if counted else 0
        if rows == 0:
            continue
        tables.append(
            {
                "table": row["name"],
                "rows": rows,
                "bytes": int(row["total"]),
                "heap_bytes": int(row["heap"]),
                "index_bytes": int(row["indexes"]),
                "bytes_per_row": row["total"] // rows,
            }
        )
    hnsw = conn.execute("SELECT pg_relation_size('memory_chunks_embedding_hnsw') AS n").fetchone()
    vectors = conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE embedding IS NOT NULL").fetchone()
    total = sum(t["bytes"] for t in tables)
    assert hnsw is not None and vectors is not None
    return {
        "users": users,
        "tables": tables,
        "hnsw_bytes": int(hnsw["n"]),
        "hnsw_bytes_per_vector": int(hnsw["n"]) // max(int(vectors["n"]), 1),
        "total_bytes": total,
        "bytes_per_user": total // users,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.shard_sizes", __doc__)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--dims", type=int, default=384, help="embedding dimension (384: the local model)")
    parser.add_argument("--memories", type=int, default=200, help="memories per user")
    parser.add_argument("--entities", type=int, default=50, help="entities per user")
    parser.add_argument("--messages", type=int, default=400, help="messages per user")
    args = parser.parse_args(argv)
    if min(args.users, args.dims, args.memories, args.entities, args.messages) < 2:
        parser.error("every count must be at least 2")
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with (
        BenchRun() as run,
        psycopg.connect(run.database(None, "engram-shard-sizes-"), row_factory=dict_row, autocommit=True) as conn,
    ):
        apply_migrations(conn)  # leaves the connection in autocommit mode
        with conn.transaction():
            load(conn, args)
        conn.execute("VACUUM ANALYZE")
        report = measure(conn, args.users)
    emit(outline("bytes on disk", report), report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
