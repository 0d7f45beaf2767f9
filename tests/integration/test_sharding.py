"""Sharding readiness (docs/operations/sharding.md): the live schema against the placement plan of
shared/infra/sharding.py, and every statement real code paths send checked for routing to one shard."""

from __future__ import annotations

import time

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.infra.sharding import BY_NAME, PLACEMENTS, distributed
from shared.maintenance import jobs
from shared.maintenance.schedule import JOBS
from shared.memory.userdata import NON_USER_TABLES, USER_TABLES
from tests.conftest import CeleryStack, wait_turn
from tests.support.routing import IGNORE_MARK, StatementLog, judge
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

_CONSTRAINTS = """
    SELECT c.relname AS table_name, i.indexrelid::regclass::text AS index_name, i.indisprimary AS is_primary,
           array_agg(a.attname::text ORDER BY array_position(i.indkey::int2[], a.attnum)) AS columns
      FROM pg_index i
      JOIN pg_class c ON c.oid = i.indrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
     WHERE n.nspname = 'public' AND i.indisunique
     GROUP BY c.relname, i.indexrelid, i.indisprimary"""

_FOREIGN_KEYS = """
    SELECT c.conrelid::regclass::text AS table_name, c.confrelid::regclass::text AS target,
           array(SELECT attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                   JOIN pg_attribute ON attrelid = c.conrelid AND attnum = k.n ORDER BY k.o) AS columns,
           array(SELECT attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
                   JOIN pg_attribute ON attrelid = c.confrelid AND attnum = k.n ORDER BY k.o) AS target_columns
      FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
     WHERE c.contype = 'f' AND n.nspname = 'public'"""

_COLUMNS = """
    SELECT table_name, column_name, is_nullable = 'YES' AS nullable
      FROM information_schema.columns WHERE table_schema = 'public'"""

# What stands between today's schema and `create_distributed_table` (docs/operations/sharding.md, "Gaps").
# Pinned both ways: a new gap fails (fix it or add it here with the plan), and so does a closed one (take it
# off the list).
KNOWN_KEY_GAPS: frozenset[str] = frozenset(
    {
        "channel_deliveries: foreign key (inbound_event_id) -> inbound_events lacks user_id",
        "channel_deliveries: foreign key (turn_id) -> turns lacks user_id",
        "channel_deliveries: primary key (id) lacks user_id",
        "channel_deliveries: unique index channel_deliveries_turn_id_key (turn_id) lacks user_id",
        "channel_deliveries: user_id may be NULL",
        "channel_identities: primary key (id) lacks user_id",
        "channel_identities: unique index "
        "channel_identities_connection_id_platform_user_id_key (connection_id, "
        "platform_user_id) lacks user_id",
        "documents: foreign key (session_id) -> sessions lacks user_id",
        "documents: primary key (id) lacks user_id",
        "documents: unique index documents_source_message_id_key (source_message_id) lacks user_id",
        "entities: primary key (id) lacks user_id",
        "inbound_events: foreign key (turn_id) -> turns lacks user_id",
        "inbound_events: primary key (id) lacks user_id",
        "inbound_events: unique index inbound_events_connection_event_idx (connection_id, external_id) lacks user_id",
        "inbound_events: user_id may be NULL",
        "llm_calls: foreign key (session_id) -> sessions lacks user_id",
        "llm_calls: foreign key (turn_id) -> turns lacks user_id",
        "llm_calls: primary key (id) lacks user_id",
        "llm_calls: user_id may be NULL",
        "memories: foreign key (source_session_id) -> sessions lacks user_id",
        "memories: foreign key (supersedes_id) -> memories lacks user_id",
        "memories: primary key (id) lacks user_id",
        "memory_chunks: foreign key (memory_id) -> memories lacks user_id",
        "memory_chunks: foreign key (message_id) -> session_messages lacks user_id",
        "memory_chunks: foreign key (session_id) -> sessions lacks user_id",
        "memory_chunks: primary key (id) lacks user_id",
        "memory_chunks: unique index memory_chunks_message_idx (message_id) lacks user_id",
        "memory_entities: foreign key (entity_id) -> entities lacks user_id",
        "memory_entities: foreign key (memory_id) -> memories lacks user_id",
        "memory_entities: no column user_id",
        "memory_entities: primary key (memory_id, entity_id) lacks user_id",
        "memory_events: foreign key (memory_id) -> memories lacks user_id",
        "memory_events: primary key (id) lacks user_id",
        "session_messages: foreign key (session_id) -> sessions lacks user_id",
        "session_messages: foreign key (turn_id) -> turns lacks user_id",
        "session_messages: primary key (id) lacks user_id",
        "session_messages: unique index session_messages_idempotency_idx (session_id, idempotency_key) lacks user_id",
        "session_prompt_epochs: foreign key (session_id) -> sessions lacks user_id",
        "session_prompt_epochs: primary key (session_id) lacks user_id",
        "sessions: primary key (id) lacks user_id",
        "turns: foreign key (session_id) -> sessions lacks user_id",
        "turns: primary key (id) lacks user_id",
        "turns: unique index turns_idempotency_idx (tenant_id, idempotency_key) lacks user_id",
        "users: unique index users_tenant_id_external_id_key (tenant_id, external_id) lacks id",
    }
)


def key_gaps(conn: Conn) -> set[str]:
    """Every place the schema breaks a Citus rule for a distributed table."""
    columns: dict[str, dict[str, bool]] = {}
    for row in conn.execute(_COLUMNS).fetchall():
        columns.setdefault(row["table_name"], {})[row["column_name"]] = row["nullable"]
    gaps: set[str] = set()
    for table in distributed():
        assert table.column is not None
        nullable = columns[table.name].get(table.column)
        if nullable is None:
            gaps.add(f"{table.name}: no column {table.column}")
        elif nullable:
            gaps.add(f"{table.name}: {table.column} may be NULL")
    for row in conn.execute(_CONSTRAINTS).fetchall():
        placement = BY_NAME[row["table_name"]]
        if placement.placement == "distributed" and placement.column not in row["columns"]:
            kind = "primary key" if row["is_primary"] else f"unique index {row['index_name']}"
            gaps.add(f"{row['table_name']}: {kind} ({', '.join(row['columns'])}) lacks {placement.column}")
    for row in conn.execute(_FOREIGN_KEYS).fetchall():
        source, target = BY_NAME[row["table_name"]], BY_NAME[row["target"]]
        if target.placement == "reference" or source.placement == "coordinator":
            continue
        pairs = set(zip(row["columns"], row["target_columns"], strict=True))
        if source.placement == "reference":
            gaps.add(f"{source.name}: foreign key to distributed {target.name}")
        elif source.group != target.group or (source.column, target.column) not in pairs:
            listed = ", ".join(row["columns"])
            gaps.add(f"{source.name}: foreign key ({listed}) -> {target.name} lacks {source.column}")
    return gaps


def test_every_table_has_a_placement_and_user_data_is_distributed(conn: Conn) -> None:
    tables = {row["tablename"] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == set(BY_NAME), "place every table in shared/infra/sharding.py (and the docs' table)"
    user_tables = {table.name for table in USER_TABLES}
    # api_keys holds a user's external id on a user-bound key, but authentication finds keys by hash alone.
    assert {t.name for t in PLACEMENTS if t.placement == "distributed"} - {"embedding_cache"} == user_tables - {
        "api_keys"
    }
    assert set(NON_USER_TABLES) | {"api_keys"} == {t.name for t in PLACEMENTS if t.group != "users"}


def test_keys_of_distributed_tables_carry_the_distribution_column(conn: Conn) -> None:
    found = key_gaps(conn)
    assert sorted(found - KNOWN_KEY_GAPS) == [], "new gaps"
    assert sorted(KNOWN_KEY_GAPS - found) == [], "closed gaps: take them off KNOWN_KEY_GAPS"


# Statements that read or change many users' rows on purpose. On Citus each is a multi-shard query: the
# coordinator sends it to every shard in parallel and merges the results (counts add up, ORDER BY ... LIMIT
# is pushed down to each shard and merged). Keyed by a fragment of the statement that names it.
SWEEPS: dict[str, str] = {
    "SELECT id, tenant_id FROM users WHERE id > $1 ORDER BY id LIMIT $2": (
        "maintenance jobs page through every user (shared/maintenance/runs.py); each page's per-user work is routed"
    ),
    "SELECT count(*) AS n FROM memories WHERE valid_until IS NULL": "/metrics: active memories (api/metrics.py)",
    "SELECT status, count(*) AS n FROM turns WHERE kind = 'chat' GROUP BY status": "/metrics gauge of turns by status",
    "SELECT vector_dims(embedding) AS dims FROM memory_chunks WHERE embedding IS NOT NULL LIMIT 1": (
        "the embedding space check reads any one stored vector (shared/embeddings/space.py)"
    ),
    # Beat's recovery sweeps (workers/app.py SWEEPS): each looks across every user for work whose task was
    # lost; on Citus a multi-shard query from the coordinator, every ENGRAM_SWEEP_INTERVAL_SECONDS.
    "SELECT DISTINCT session_id FROM turns WHERE status IN ('queued', 'running') AND updated_at <": (
        "stalled-turn sweep (shared/queueing/recovery.py)"
    ),
    "UPDATE channel_deliveries SET updated_at = now() WHERE id IN ( SELECT id FROM channel_deliveries WHERE": (
        "delivery re-drive sweep (shared/channels/deliveries.py); its claim by id, SKIP LOCKED, stays per shard"
    ),
    "FROM memory_chunks WHERE message_id IS NOT NULL AND embedding IS NULL LIMIT": (
        "transcript embedding backlog check before a drain is requested"
    ),
    "SELECT DISTINCT session_id FROM session_messages WHERE extracted_at IS NULL AND created_at <": (
        "unmined-messages sweep (workers/maintenance.py), when ENGRAM_AUTO_MEMORY is on"
    ),
    "SELECT session_id FROM turns WHERE tenant_id = $1 AND status = 'queued' GROUP BY session_id": (
        "per-tenant fairness: a tenant's sessions with queued turns, across its users (shared/queueing/fairness.py)"
    ),
}

# Statements that would not route today: the work to do before `create_distributed_table`
# (docs/operations/sharding.md, "Gaps"). Each names what has to change. On Citus as they stand, a single-table
# one runs on every shard (correct, N times the cost); a join on a non-distribution column is refused.
UNROUTED_GAPS: dict[str, str] = {
    # Users are addressed by the tenant's external id: the users table cannot be found by it without a scan.
    "FROM users WHERE tenant_id = $1 AND external_id = $2": "find users through a directory keyed by external id",
    "INSERT INTO users (tenant_id, external_id) SELECT": "the (tenant, external id) unique key moves to the directory",
    "INSERT INTO users (tenant_id, external_id) VALUES": "the (tenant, external id) unique key moves to the directory",
    "JOIN users u ON u.id = s.user_id WHERE s.tenant_id = $1 AND u.external_id = $2": "session by external user id",
    # Rows addressed by their own id in tasks and follow-up statements: the task or caller knows the user.
    "FROM turns t JOIN sessions s ON s.id = t.session_id JOIN users u": "GET /v1/turns/{id}: add the turn's user",
    "SELECT t.*, u.timezone FROM turns t JOIN users u": "turn runner claims a session's next turn by session id",
    "SELECT 1 FROM turns WHERE session_id = $1 AND status IN": "turn runner: more turns queued in the session?",
    "UPDATE turns SET status = 'running'": "turn runner: by turn id",
    "UPDATE turns SET status = $1, reply = $2": "turn runner: by turn id",
    "UPDATE turns SET details = $1 WHERE id = $2": "ingest: by turn id",
    "SELECT * FROM sessions WHERE id = $1": "by session id",
    "SELECT id, tenant_id FROM sessions WHERE id = ANY($1)": "fairness: the tenants of sessions by session id",
    "SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE": "session lock by id (shared/turns/accept.py)",
    "UPDATE sessions SET updated_at = now()": "token count by session id (and its session_messages subquery)",
    "UPDATE sessions SET last_embedded_message_id": "transcript units: by session id",
    "FROM session_messages WHERE session_id = $1": "a session's messages by session id",
    "FROM session_messages m WHERE m.session_id = s.id": "consolidation: correlated on session id, add m.user_id",
    "FROM session_prompt_epochs e WHERE e.session_id = $1": "prompt epoch by session id; frozen memories by id",
    "FROM llm_calls WHERE session_id = $1": "usage of a session by session id (shared/llm/ledger.py)",
    "FROM llm_calls WHERE turn_id = $1": "usage of a turn by turn id (shared/llm/ledger.py)",
    "UPDATE channel_deliveries d SET status = 'pending'": "delivery of a finished turn by turn id",
    "UPDATE memories SET embedded_at = now() WHERE id = ANY($1)": "memory indexing: by memory ids",
    "FROM memories WHERE id = ANY($1) AND valid_until IS NULL AND embedded_at IS NULL": "memory indexing: by ids",
    "DELETE FROM memory_chunks WHERE memory_id = ANY($1)": "memory indexing: by memory ids",
    "UPDATE memory_chunks SET embedding = $1": "embedding drain stores a vector by chunk id",
    # The search statement joins candidates back by id (memory_entities, chunks, messages, sessions).
    "WITH q_terms AS MATERIALIZED": "search: every join on a row id needs the user too, and memory_entities a user_id",
    "INSERT INTO memory_entities": "memory_entities has no user_id column",
    # Claims of pending work across users hold advisory locks: on Citus those would be taken on worker nodes.
    "FROM memories m WHERE m.embedded_at IS NULL AND m.valid_until IS NULL AND NOT EXISTS": (
        "embedding drain, its check for work and its claim: per-shard claims (or a per-user queue) instead of one"
        " global scan"
    ),
    "FROM memory_chunks m WHERE message_id IS NOT NULL AND embedding IS NULL": (
        "transcript drain, its check for work and its claim: per-shard claims (or a per-user queue) instead of one"
        " global scan"
    ),
    # Cross-user by nature, but not in a form Citus runs.
    "FROM llm_calls WHERE tenant_id = t.id AND created_at >=": (
        "tenant budget: a correlated sum over every user's calls on each turn; keep a per-tenant usage counter"
    ),
    "DELETE FROM embedding_cache WHERE ctid = ANY": "cache eviction by ctid (per shard on Citus): delete by key",
    "DELETE FROM embedding_cache ec WHERE ec.content_hash = ANY($1) AND NOT EXISTS": (
        "erasure's cache cleanup joins every user's chunks on content_hash: look them up first, then delete"
    ),
}


def _wait_embedded(timeout: float = 60) -> None:
    """Until every memory and transcript unit has its vector (the embedding drain's statements ran)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.connection() as conn:
            row = conn.execute(
                f"SELECT {IGNORE_MARK} count(*) AS n FROM memory_chunks WHERE embedding IS NULL"
            ).fetchone()
            pending = conn.execute(
                f"SELECT {IGNORE_MARK} count(*) AS n FROM memories WHERE embedded_at IS NULL AND valid_until IS NULL"
            ).fetchone()
        if row and pending and row["n"] == 0 and pending["n"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError("vectors were not stored")


def _workload(api: httpx.Client, fake_llm: FakeLLM) -> None:
    """One pass over what users and operators do: memory CRUD and search, a chat turn, ingest, context,
    profile, export and erasure, every maintenance job, metrics."""
    for user in ("alice", "bob"):
        created = api.post(f"/v1/users/{user}/memories", json={"key": "home city", "value": f"{user} lives in Lisbon"})
        assert created.status_code == 201, created.text
    memory_id = created.json()["memory"]["id"]
    fake_llm.script(FakeReply(text="Nice to meet you, Bob."), match="Hi, I am Bob.")
    turn = api.post("/v1/sessions/s1/turns", json={"user_id": "bob", "text": "Hi, I am Bob."})
    assert turn.status_code == 202, turn.text
    assert wait_turn(api, turn.json()["turn_id"])["status"] == "done"
    ingested = api.post(
        "/v1/users/bob/sessions/chat-1/messages",
        json={"messages": [{"role": "user", "content": "I am planning a trip to Kyoto with Carol."}]},
    )
    assert ingested.status_code == 202, ingested.text
    _wait_embedded()
    calls = [
        api.post("/v1/users/bob/memories/search", json={"query": "Where does he live?"}),
        api.get("/v1/users/bob/memories"),
        api.get(f"/v1/users/bob/memories/{memory_id}"),
        api.patch(f"/v1/users/bob/memories/{memory_id}", json={"value": "bob lives in Porto"}),
        api.get(f"/v1/users/bob/memories/{memory_id}/history"),
        api.get("/v1/users/bob/entities"),
        api.get("/v1/users/bob/stats"),
        api.post("/v1/users/bob/context", json={"query": "Kyoto trip"}),
        api.get("/v1/sessions/s1", params={"user_id": "bob"}),
        api.get("/v1/sessions/s1/messages", params={"user_id": "bob"}),
        api.get("/v1/users/bob/profile"),
        api.patch("/v1/users/bob/profile", json={"location": "Porto"}),
        api.get("/v1/users/bob/export"),
        api.get("/v1/admin/jobs"),
        api.get("/metrics"),
    ]
    assert [call.status_code for call in calls if call.status_code >= 400] == [], [c.text for c in calls]
    _wait_embedded()
    for job in JOBS:
        jobs.run(job, get_settings())
    erased = api.delete("/v1/users/alice")
    assert erased.status_code == 200, erased.text


def _wait_swept(log: StatementLog, timeout: float = 60) -> None:
    """Until beat's recovery sweep has run inside the capture (shared/queueing/recovery.py reads stalled turns)."""
    deadline = time.monotonic() + timeout
    while not any("SELECT DISTINCT session_id FROM turns" in sql for sql in log.statements()):
        assert time.monotonic() < deadline, "no recovery sweep ran while the statements were captured"
        time.sleep(0.5)


def test_statements_of_real_code_paths_route_to_one_shard(
    services: TestServices, api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    assert services.postgres is not None
    # Beat's sweeps (every ENGRAM_SWEEP_INTERVAL_SECONDS) talk to the same server: started here so they are
    # always part of the capture, never only when an earlier test in the session happened to start beat.
    workers.start_beat()
    with StatementLog(services.database_url, services.postgres.pgdata / "log") as log:
        _workload(api, fake_llm)
        _wait_swept(log)
    verdicts = [verdict for sql in log.statements() if (verdict := judge(sql)) is not None]
    known = {**SWEEPS, **UNROUTED_GAPS}
    unexplained = [
        f"{', '.join(v.unpinned)}: {v.sql}"
        for v in verdicts
        if not v.routable and not any(fragment in v.sql for fragment in known)
    ]
    assert unexplained == [], "filter by the distribution column, or name the statement in SWEEPS / UNROUTED_GAPS"
    routed = [v for v in verdicts if v.routable]
    print(f"statements on distributed tables: {len(verdicts)}, routed to one shard: {len(routed)}")
    assert len(routed) > 50, f"only {len(routed)} statements routed: the workload or the log capture broke"
