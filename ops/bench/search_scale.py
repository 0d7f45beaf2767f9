"""Search at scale: shared.memory.search.search() over synthetic memories (data/search_scale.json, real MiniLM
vectors plus noise) on an embedded Postgres of its own, optionally with one heavy user; and at that scale the
context's latency, the rate of new memories until searchable and LoCoMo's recall (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
import psycopg
from psycopg.rows import dict_row

from ops.bench import harness
from ops.bench import locomo_retrieval as locomo
from ops.bench.harness import BenchRun, MemorySampler, bench_parser, emit, megabytes, outline, percentile, run_main
from ops.bench.locomo_data import DEV_FILE, Conversation, load_conversations
from ops.bench.stack import BenchError
from ops.gateway import create_app
from shared.context.packed import compile_context
from shared.embeddings import ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import LocalEmbedder
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.infra.migrate import apply_migrations
from shared.memory import service, writes
from shared.memory.entity_extraction import extract_entities
from shared.memory.indexing import embeddable_text, index_pending_memories
from shared.memory.memory_input import MemoryInput
from shared.memory.search import SearchOptions, SearchResult, search, search_settings, search_statement
from shared.memory.search_reads import large_user_query
from shared.memory.store import Scope
from shared.memory.writes import UserRef

TENANT = "bench-search-scale"
HNSW_INDEX = "memory_chunks_embedding_hnsw"  # shared/embeddings/space.py INDEX_NAME
MEMORY_TABLES = ("memories", "memory_chunks", "entities", "memory_entities")
# What load() COPYs (binary): each table's columns, of type text unless named.
COPY_COLUMNS = {
    "memories": "id:int8 tenant_id:int8 user_id:int8 namespace key value kind tags:text[] event_time:timestamptz "
    "created_at:timestamptz updated_at:timestamptz valid_from:timestamptz embedded_at:timestamptz source",
    "memory_chunks": "id:int8 tenant_id:int8 user_id:int8 memory_id:int8 text end_char:int4 content_hash "
    "embedding:vector created_at:timestamptz",
    "entities": "id:int8 tenant_id:int8 user_id:int8 canonical_name normalized_name entity_type mention_count:int4",
    "memory_entities": "memory_id:int8 entity_id:int8",
}
GOAL_P95_MS = 20.0  # the goal for hybrid search at 1M memories over 10k users
GOAL_CONTEXT_P95_MS, CONTEXT_TOKENS = 50.0, 1000  # and for the context at a 1,000-token budget
VECTOR_ONLY = SearchOptions(relative_floor=0.0, legs=("vector",))


# Facts and questions: the words and sentence templates are data, beside this module.
_DATA = json.loads((Path(__file__).parent / "data" / "search_scale.json").read_text(encoding="utf-8"))
VOCAB: dict[str, list[str]] = {
    slot: [w.strip() for w in words.split(",") if w.strip()] for slot, words in _DATA["vocab"].items()
}
# kind, namespace ("{date}": the fact's event date), key, text, tags (comma-separated), held-out question forms.
TEMPLATES: list[list[str]] = _DATA["templates"]
FREE_QUESTIONS: list[str] = _DATA["free_questions"]  # no template answers them: OR queries with common words
SLOT = re.compile(r"\{(\w+)\}")


def _fill(rng: random.Random, text: str, values: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """`text` with its slots filled (independently, unless `values` has them); the values used."""
    values = dict(values or {})

    def slot(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            bounds = {"day": (2, 28), "year": (2008, 2027)}.get(name)
            values[name] = str(rng.randint(*bounds)) if bounds else rng.choice(VOCAB[name])
        return values[name]

    return SLOT.sub(slot, text), values


@dataclass(frozen=True)
class Fact:
    kind: str
    namespace: str
    key: str
    value: str
    tags: tuple[str, ...]
    event_time: datetime | None


def generate_facts(rng: random.Random, count: int, now: datetime) -> list[Fact]:
    """`count` distinct facts; templates chosen uniformly, slots independently."""
    facts: dict[str, Fact] = {}
    attempts = 0
    while len(facts) < count:
        attempts += 1
        if attempts > count * 50:
            raise BenchError(f"the templates cannot make {count} distinct facts; lower --pool")
        kind, namespace, key_form, text, tags, *_questions = rng.choice(TEMPLATES)
        value, values = _fill(rng, text)
        if value in facts:
            continue
        key = re.sub(r"[^a-z0-9]+", "-", _fill(rng, key_form, values)[0].lower()).strip("-")
        event_time = None
        if "{date}" in namespace:
            event_time = now - timedelta(days=rng.randint(1, 720), hours=rng.randint(0, 23))
            namespace = namespace.replace("{date}", event_time.date().isoformat())
        tag_list = tuple(t.strip() for t in tags.split(",") if t.strip())
        facts[value] = Fact(kind, namespace, key, value, tag_list, event_time)
    return list(facts.values())


def generate_questions(rng: random.Random, count: int, exclude: set[str]) -> list[str]:
    questions: dict[str, None] = {}
    while len(questions) < count:
        free = rng.random() < 0.05
        question = rng.choice(FREE_QUESTIONS) if free else _fill(rng, rng.choice(rng.choice(TEMPLATES)[5:]))[0]
        if question not in exclude:
            questions[question] = None
    return list(questions)


def embed(texts: Sequence[str]) -> np.ndarray:
    return np.asarray(LocalEmbedder(batch_size=128).embed(list(texts)), dtype=np.float32)


def noisy(base: np.ndarray, noise_norm: float, rng: np.random.Generator) -> np.ndarray:
    """`base` rows plus isotropic Gaussian noise of expected norm `noise_norm`, re-normalised."""
    sigma = noise_norm / np.sqrt(base.shape[1])
    out = base + rng.normal(0.0, sigma, size=base.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


@dataclass
class Setup:
    tenant_id: int
    user_ids: list[int]
    hnsw_indexdef: str
    external_ids: dict[int, str]


def prepare(conn: Conn, users: int) -> Setup:
    """The tenant, its users and the embedding space: the product's HNSW index, its definition kept."""
    apply_migrations(conn)  # leaves the connection in autocommit mode
    conn.autocommit = False
    rows = conn.execute(
        """WITH tenant AS (INSERT INTO tenants (name) VALUES (%s) RETURNING id)
           INSERT INTO users (tenant_id, external_id) SELECT tenant.id, 'user-' || lpad(n::text, 4, '0')
           FROM tenant, generate_series(0, %s - 1) n RETURNING tenant_id, id, external_id""",
        (TENANT, users),
    ).fetchall()
    tenant_id, external_ids = int(rows[0]["tenant_id"]), {int(r["id"]): str(r["external_id"]) for r in rows}
    ensure_embedding_space(conn, LocalEmbedder())
    conn.commit()
    register_vector_types(conn)
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (HNSW_INDEX,)).fetchall()[0]
    return Setup(tenant_id, sorted(external_ids), str(row["indexdef"]), external_ids)


# What was loaded, kept in memory for exact (numpy) nearest neighbours: user id -> (memory ids, float32 rows).
Corpus = dict[int, tuple[np.ndarray, np.ndarray]]


def memories_per_user(size: int, users: int, heavy: int = 0) -> list[int]:
    """Memories of each user: evenly spread, or `heavy` for the first user and the rest evenly over the others."""
    if heavy:
        return [heavy, *memories_per_user(size - heavy, users - 1)]
    return [size // users + (number < size % users) for number in range(users)]


def load(
    conn: Conn, setup: Setup, size: int, facts: Sequence[Fact], pool_vectors: np.ndarray, args: argparse.Namespace
) -> Corpus:
    """`size` memories of `facts` (pool vectors plus noise) for the users, bulk-loaded with the HNSW index dropped."""
    rng, now, users = np.random.default_rng(args.seed + size), datetime.now(UTC), setup.user_ids
    per_user = memories_per_user(size, len(users), args.heavy_user)
    # Ids after the rows already there (the LoCoMo users'); the sequences are moved past the loaded ones after.
    base = [conn.execute(f"SELECT coalesce(max(id), 0) AS n FROM {t}").fetchall()[0]["n"] for t in MEMORY_TABLES[:3]]

    # Bulk load first, index after: the build is then one pass (what a restore or reindex does).
    conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")

    rows: list[tuple[datetime, int, Fact, str, np.ndarray]] = []  # created, user id, fact, key, vector
    for user_id, count in zip(users, per_user, strict=True):
        # Distinct facts while the pool suffices; a heavier user repeats facts (as distinct noisy vectors).
        chosen = rng.choice(len(facts), size=count, replace=count > len(facts))
        keys: set[tuple[str, str]] = set()
        for index, vector in zip(chosen, noisy(pool_vectors[chosen], args.noise, rng), strict=True):
            fact = facts[int(index)]
            key, suffix = fact.key, 1
            while (fact.namespace, key) in keys:  # a second "sister-maria-home": keys stay unique per user
                suffix += 1
                key = f"{fact.key}-{suffix}"
            keys.add((fact.namespace, key))
            created = now - timedelta(seconds=int(rng.integers(0, 730 * 86400)))
            rows.append((created, user_id, fact, key, vector))
    # Ids and physical order follow arrival time, interleaving users as production writes do. Loading
    # user by user would put each user's chunks on a few adjacent pages and flatter the per-user scans.
    rows.sort(key=lambda r: r[0])

    mem_rows: list[tuple[Any, ...]] = []
    chunk_rows: list[tuple[Any, ...]] = []
    entity_rows: list[list[Any]] = []
    link_rows: set[tuple[int, int]] = set()  # one link per (memory, entity), as the product's ON CONFLICT
    entities: dict[tuple[int, str, str], int] = {}
    mentions_cache: dict[str, list[tuple[str, str, str]]] = {}
    by_user_ids: dict[int, list[int]] = {u: [] for u in users}
    by_user_vectors: dict[int, list[np.ndarray]] = {u: [] for u in users}
    for number, (created, user_id, fact, key, vector) in enumerate(rows, start=1):
        memory_id, owner, times = base[0] + number, (setup.tenant_id, user_id), [created] * 4  # as embedded_at too
        tags = list(fact.tags)
        mem_rows.append(
            (memory_id, *owner, fact.namespace, key, fact.value, fact.kind, tags, fact.event_time, *times, "bench")
        )
        text = embeddable_text({"namespace": fact.namespace, "key": key, "kind": fact.kind, "value": fact.value})
        digest = hashlib.sha256(text.encode()).hexdigest()
        chunk_rows.append((base[1] + number, *owner, memory_id, text, len(text), digest, vector, created))
        by_user_ids[user_id].append(memory_id)
        by_user_vectors[user_id].append(vector)
        # The text link_entities() extracts from; facts repeat across users, so cache by text.
        source = f"{key.replace('-', ' ')}: {fact.value}"
        if source not in mentions_cache:
            mentions_cache[source] = [(m.name, m.normalized, m.entity_type) for m in extract_entities(source)]
        for name, normalized, entity_type in mentions_cache[source]:
            entity_key = (user_id, entity_type, normalized)
            if entity_key not in entities:
                entities[entity_key] = len(entity_rows)
                entity_rows.append([base[2] + len(entity_rows) + 1, *owner, name, normalized, entity_type, 0])
            entity = entity_rows[entities[entity_key]]
            entity[6] += 1
            link_rows.add((memory_id, entity[0]))

    tables: tuple[Sequence[Sequence[Any]], ...] = (mem_rows, chunk_rows, entity_rows, sorted(link_rows))
    with conn.cursor() as cur:
        for (table, spec), table_rows in zip(COPY_COLUMNS.items(), tables, strict=True):
            columns = [column.split(":") for column in spec.split()]
            with cur.copy(f"COPY {table} ({', '.join(c[0] for c in columns)}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types([c[1] if len(c) > 1 else "text" for c in columns])
                for table_row in table_rows:
                    copy.write_row(table_row)
        for table in MEMORY_TABLES[:3]:  # the product's own writes after the load take the next ids
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    conn.commit()
    return {u: (np.asarray(by_user_ids[u], dtype=np.int64), np.stack(by_user_vectors[u])) for u in users}


def build_index(conn: Conn, indexdef: str, maintenance_work_mem: str) -> float:
    # pgvector builds the graph in memory while it fits maintenance_work_mem and falls back to a far
    # slower on-disk build after; Postgres's 64 MB default holds ~40k vectors of 384 dims.
    conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
    start = time.perf_counter()
    conn.execute(indexdef)
    conn.commit()
    build_s = time.perf_counter() - start
    # VACUUM cannot run in a transaction; it also sets the visibility map and hint bits a freshly
    # COPYed table lacks, so the first measured queries do not pay for them.
    conn.autocommit = True
    for table in MEMORY_TABLES:
        conn.execute(f"VACUUM (ANALYZE) {table}")
    # The load and the index build leave hundreds of MB of dirty buffers; without a checkpoint
    # the measured reads would each first write one back (steady-state reads do not).
    conn.execute("CHECKPOINT")
    conn.autocommit = False
    return build_s


def relation_sizes(conn: Conn) -> dict[str, int]:
    """Bytes of the memory tables (with their indexes and TOAST) and of each of their indexes."""
    rows = conn.execute(
        """SELECT t.relname || ' (total)' AS name, pg_total_relation_size(t.oid) AS size
           FROM pg_class t WHERE t.relname = ANY(%(tables)s)
           UNION ALL SELECT i.relname, pg_relation_size(i.oid)
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
           WHERE t.relname = ANY(%(tables)s) ORDER BY 1""",
        {"tables": list(MEMORY_TABLES[:2])},
    ).fetchall()
    return {r["name"]: int(r["size"]) for r in rows}


def vector_recall(corpus: Corpus, user_id: int, vector: np.ndarray, results: Sequence[SearchResult], k: int) -> float:
    """Share of the exact top-k (by cosine over the user's vectors) that the search returned. A returned
    memory counts when its similarity reaches the exact k-th best (minus float32 rounding)."""
    memory_ids, vectors = corpus[user_id]
    similarity = vectors @ vector
    k = min(k, len(similarity))
    kth = float(np.sort(similarity)[-k])
    position = {int(memory_id): i for i, memory_id in enumerate(memory_ids)}
    hits = sum(1 for r in results if r.id is not None and float(similarity[position[r.id]]) >= kth - 1e-5)
    return min(hits, k) / k


Queries = Sequence[tuple[str, np.ndarray]]  # question, its vector


def run_searches(
    conn: Conn, users: Sequence[Scope], corpus: Corpus, queries: Queries, mode: str, args: Any, rng: random.Random
) -> dict[str, Any]:
    """--queries timed searches (after --warmup untimed ones) of random `users` and questions, each in its own
    transaction, timed around the call (round trips, planning, execution and result building)."""
    # The vector mode: its leg alone, no minimum score, so the results are the leg's top `limit` and recall
    # is measurable (relative_floor is applied in Python after the query: the SQL and its cost are the same).
    options = VECTOR_ONLY if mode == "vector" else SearchOptions()
    latencies, results_per_search, recalls = [], [], []
    large: dict[int, bool] = {}  # by user: the product reads it with the search's other reads (search_reads)
    for number in range(args.warmup + args.queries):
        scope = rng.choice(users)
        if scope.user_id not in large:
            large[scope.user_id] = bool(db.first(conn.execute(*large_user_query(scope)).fetchall(), "large"))
        text, query_vector = rng.choice(queries)
        vector = None if mode == "text" else query_vector.tolist()
        start = time.perf_counter()
        results = search(conn, scope, text, query_vector=vector, options=options, large_user=large[scope.user_id])
        elapsed = (time.perf_counter() - start) * 1000
        conn.commit()
        if number < args.warmup:
            continue
        latencies.append(elapsed)
        results_per_search.append(len(results))
        if mode == "vector":
            recalls.append(vector_recall(corpus, scope.user_id, query_vector, results, options.limit))
    return {
        **{f"p{q}_ms": round(percentile(latencies, q) or 0.0, 2) for q in (50, 95, 99)},
        "mean_ms": round(float(np.mean(latencies)), 2),
        "results": round(float(np.mean(results_per_search)), 1),
        "recall": round(float(np.mean(recalls)), 3) if recalls else None,
        "n": len(latencies),
    }


def vector_plan(conn: Conn, scope: Scope, question: str, vector: np.ndarray) -> str:
    """The plan Postgres picks for the vector mode's statement (EXPLAIN, with the settings search() sends):
    the HNSW index, or the user's rows through the btree on user_id and a sort by distance."""
    sql, params = search_statement(scope, question, query_vector=vector.tolist(), options=VECTOR_ONLY)
    conn.execute(*search_settings(VECTOR_ONLY, large_user=False))
    plan = "\n".join(row["QUERY PLAN"] for row in conn.execute(f"EXPLAIN {sql}", params).fetchall())
    conn.commit()
    return "hnsw" if HNSW_INDEX in plan else "btree+sort" if "memory_chunks_user_idx" in plan else "other"


def locomo_recall(conn: Conn, ingested: list[tuple[Conversation, locomo.Ingested]]) -> dict[str, Any]:
    """recall@10 per mode over the conversations' questions, as ops.bench.locomo_retrieval scores it."""
    stats = {mode: locomo.ModeStats() for mode in locomo.MODES}
    for conversation, users_rows in ingested:
        locomo.evaluate(conn, service.process_embedder(), conversation, users_rows, stats, [])
    recall: dict[str, Any] = {mode: round(s.mean("recall@10") or 0.0, 4) for mode, s in stats.items()}
    return recall | {"questions": stats["text"].count("all")}


def ingest_rate(conn: Conn, setup: Setup, facts: Sequence[Fact], count: int, rng: random.Random) -> dict[str, Any]:
    """`count` new memories of random users through the product's write path (shared.memory.writes.store, as REST
    and MCP write; nothing queued) and the embeddings task's step in this process (index_pending_memories), from
    the first write until a vector search (the memory's own chunk vector as the query) returns every one."""
    embedder, batch_size = service.process_embedder(), get_settings().embedding_batch_size
    written: list[tuple[Scope, int]] = []  # the user's scope, the memory's id
    start = time.perf_counter()  # the first write
    writable = [f for f in facts if f.kind != "directive"]  # the store refuses a directive from a client
    for number, fact in enumerate(rng.sample(writable, min(count, len(writable)))):
        user_id = rng.choice(setup.user_ids)
        item = MemoryInput(key=f"ingested-{number}", value=fact.value, namespace=fact.namespace, kind=fact.kind)
        result = writes.store(UserRef(setup.tenant_id, setup.external_ids[user_id]), item, "bench", enqueue=None)
        written.append((Scope(setup.tenant_id, user_id), int(result.memory["id"])))
    write_s = time.perf_counter() - start
    while index_pending_memories(embedder, batch_size).memories:
        pass
    rows = conn.execute(
        "SELECT memory_id, embedding FROM memory_chunks WHERE memory_id = ANY(%s)", ([m for _, m in written],)
    ).fetchall()
    vectors = {int(row["memory_id"]): row["embedding"].to_list() for row in rows}
    found = 0
    for scope, memory_id in written:
        results = search(conn, scope, "", query_vector=vectors.get(memory_id), options=VECTOR_ONLY)
        found += any(r.id == memory_id for r in results)
        conn.commit()
    total_s = time.perf_counter() - start
    seconds = {"write_s": round(write_s, 2), "total_s": round(total_s, 2)}
    return {"memories_per_s": round(len(written) / total_s, 1), "searchable": found, "written": len(written), **seconds}


def context_latency(tenant_id: int, users: dict[str, list[str]], questions: list[str], args: Any) -> dict[str, Any]:
    """compile_context (what POST /v1/users/{id}/context runs) at a CONTEXT_TOKENS budget for random `users` (per
    group), in a process of its own that builds the gateway's app and warms its embedding model as the gateway does
    at start: p50/p95 per group, and the process's peak RSS (a gateway's, short of the HTTP server and its pool)."""
    create_app()
    service.warm_query_embedder()
    rng, out = random.Random(args.seed), {}
    # Sampled RSS, not ru_maxrss: Linux keeps the high-water mark across the exec that started this process.
    with db.connect() as conn, MemorySampler({"context": os.getpid()}, interval=0.5, tree=False, pss=False) as rss:
        context = partial(compile_context, conn, get_settings(), tenant_id=tenant_id, max_tokens=CONTEXT_TOKENS)
        for group, names in users.items():
            service.forget_recent_queries()  # each group embeds its questions afresh (the memo holds vectors)
            latencies = []
            for number in range(args.warmup + args.queries):
                start = time.perf_counter()
                context(user_external_id=rng.choice(names), query=rng.choice(questions))
                conn.commit()
                if number >= args.warmup:
                    latencies.append((time.perf_counter() - start) * 1000)
            out[group] = harness.distribution(latencies, (50, 95))
    return out | {"peak_rss_mb": rss.peaks["context"].figures()["peak_rss_mb"]}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.search_scale", __doc__, keep=True)
    parser.add_argument("--memories", type=int, default=10000, help="memories loaded")
    parser.add_argument("--users", type=int, default=100, help="users the memories are spread over")
    parser.add_argument("--heavy-user", type=int, default=0, help="memories of one user (the rest spread evenly)")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per mode and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed searches before each mode")
    parser.add_argument("--pool", type=int, default=4000, help="distinct facts embedded with the real model")
    parser.add_argument("--questions", type=int, default=300, help="distinct held-out questions")
    parser.add_argument("--noise", type=float, default=0.25, help="expected norm of the noise added per memory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the HNSW build (as for a reindex)")
    parser.add_argument("--ingest", type=int, default=300, help="memories written after the load, until searchable")
    parser.add_argument("--locomo", type=int, default=2, metavar="N", help="LoCoMo conversations measured (0: none)")
    args = parser.parse_args(argv)
    if args.memories < args.users or args.users < 1 or args.queries < 1:
        parser.error("need --users >= 1, --queries >= 1 and --memories >= --users")
    if args.heavy_user and not (args.users > 1 and 0 < args.heavy_user <= args.memories - args.users + 1):
        parser.error("--heavy-user needs --users >= 2 and leaves at least one memory to each other user")
    return args


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    size, rng = args.memories, random.Random(args.seed)
    # The product's own paths (writes, indexing, context) find the database through its settings.
    os.environ["ENGRAM_DATABASE_URL"] = url
    get_settings.cache_clear()
    print(f"embedding {args.pool} facts and {args.questions} questions ...", file=sys.stderr, flush=True)
    facts = generate_facts(rng, args.pool, datetime.now(UTC))
    questions = generate_questions(rng, args.questions, {f.value for f in facts})
    pool_vectors = embed([f.value for f in facts])
    queries = list(zip(questions, embed(questions), strict=True))
    # Other work on the machine inflates latencies: the load average is recorded so a reader can tell.
    config = {"memories": size, "users": args.users, "heavy_user": args.heavy_user, "queries": args.queries}
    config.update(pool=len(facts), cpus=os.cpu_count(), loadavg_start=round(os.getloadavg()[0], 2))
    with cast(Conn, psycopg.connect(url, row_factory=dict_row)) as conn:
        setup = prepare(conn, args.users)
        # The same LoCoMo users, rows and questions before the bulk load (a small table) and after it.
        embedder, conversations = service.process_embedder(), load_conversations(DEV_FILE)[: args.locomo]
        ingested = [(c, locomo.ingest(conn, embedder, setup.tenant_id, c, True)) for c in conversations]
        recall = {"before": locomo_recall(conn, ingested)} if ingested else {}
        print(f"[{size}] loading, building the HNSW index, VACUUM ANALYZE ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        corpus = load(conn, setup, size, facts, pool_vectors, args)
        load_s = time.perf_counter() - start
        build_s = build_index(conn, setup.hnsw_indexdef, args.maintenance_work_mem)
        sizes = relation_sizes(conn)
        conn.commit()
        recall.update({"after": locomo_recall(conn, ingested)} if ingested else {})
        postmaster = psutil.Process(conn.info.backend_pid).ppid()  # the embedded server's
        mrng = random.Random(args.seed + size)
        scopes = [Scope(setup.tenant_id, user_id) for user_id in setup.user_ids]  # the heavy user's first
        groups = {"random users": [setup.external_ids[u] for u in setup.user_ids]}
        # PSS: the backends share shared_buffers, which every one's RSS counts again.
        with MemorySampler({"postgres": postmaster}, interval=1.0) as pg_memory:
            modes = ("hybrid", "text", "vector")
            latency = {mode: run_searches(conn, scopes, corpus, queries, mode, args, mrng) for mode in modes}
            plans = {"random user": vector_plan(conn, mrng.choice(scopes[1:] or scopes), *queries[0])}
            if args.heavy_user:
                for mode in ("hybrid", "vector"):
                    latency[f"heavy user {mode}"] = run_searches(conn, scopes[:1], corpus, queries, mode, args, mrng)
                plans["heavy user"] = vector_plan(conn, scopes[0], *queries[0])
                groups["heavy user"] = [setup.external_ids[setup.user_ids[0]]]
            print(f"[{size}] context at {CONTEXT_TOKENS} tokens, ingest ...", file=sys.stderr, flush=True)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
                context = process.submit(context_latency, setup.tenant_id, groups, questions, args).result()
            ingest = ingest_rate(conn, setup, facts, args.ingest, mrng) if args.ingest else None
    hybrid_p95, context_p95 = latency["hybrid"]["p95_ms"], context["random users"]["p95"]
    return {
        "hybrid_p95_ms": hybrid_p95,
        "meets_goal": hybrid_p95 <= GOAL_P95_MS,
        "goal_hybrid_p95_ms": GOAL_P95_MS,
        "context_p95_ms": context_p95,
        "context_meets_goal": context_p95 <= GOAL_CONTEXT_P95_MS,
        "goal_context_p95_ms": GOAL_CONTEXT_P95_MS,
        "load_s": round(load_s, 1),
        "hnsw_build_s": round(build_s, 1),
        "relation_mb": {name: megabytes(value) for name, value in sizes.items()},
        "postgres_memory": pg_memory.peaks["postgres"].figures(),
        "latency": latency,
        "vector_plan": plans,
        "context_ms": context,
        "ingest": ingest,
        "locomo_recall@10": recall,
        "config": {**config, "loadavg_end": round(os.getloadavg()[0], 2)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def bench() -> int:
        with BenchRun(keep=args.keep) as cleanup:
            report = run(args, cleanup.database(None, "engram-search-bench-"))
            title = f"engram search scale benchmark (goal: hybrid p95 <= {GOAL_P95_MS:g} ms)"
            emit(outline(title, report), report, True)  # always: the JSON line is this benchmark's record
            return 0

    return run_main(bench)


if __name__ == "__main__":
    sys.exit(main())
