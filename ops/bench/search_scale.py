"""Hybrid search latency at scale: shared.memory.search.search() over synthetic memories (data/search_scale.json,
real MiniLM vectors plus noise) on an embedded Postgres of its own."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
import psycopg
from psycopg.rows import dict_row

from ops.bench.harness import BenchRun, MemorySampler, bench_parser, emit, megabytes, outline, percentile, run_main
from ops.bench.stack import BenchError
from shared.embeddings import ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import LocalEmbedder
from shared.infra.db import Conn
from shared.infra.migrate import apply_migrations
from shared.memory.entity_extraction import extract_entities
from shared.memory.indexing import embeddable_text
from shared.memory.search import SearchOptions, SearchResult, search
from shared.memory.store import Scope

TENANT = "bench-search-scale"
HNSW_INDEX = "memory_chunks_embedding_hnsw"  # shared/embeddings/space.py INDEX_NAME
MEMORY_TABLES = ("memories", "memory_chunks", "entities", "memory_entities")
GOAL_P95_MS = 20.0  # the goal for hybrid search at 1M memories over 10k users


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
            if name == "day":
                values[name] = str(rng.randint(2, 28))
            elif name == "year":
                values[name] = str(rng.randint(2008, 2027))
            else:
                values[name] = rng.choice(VOCAB[name])
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
        if rng.random() < 0.05:
            question = rng.choice(FREE_QUESTIONS)
        else:
            question = _fill(rng, rng.choice(rng.choice(TEMPLATES)[5:]))[0]
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


def prepare(conn: Conn, users: int) -> Setup:
    """The tenant, its users and the embedding space: the product's HNSW index, its definition kept."""
    apply_migrations(conn)  # leaves the connection in autocommit mode
    conn.autocommit = False
    rows = conn.execute(
        """WITH tenant AS (INSERT INTO tenants (name) VALUES (%s) RETURNING id)
           INSERT INTO users (tenant_id, external_id) SELECT tenant.id, 'user-' || lpad(n::text, 4, '0')
           FROM tenant, generate_series(0, %s - 1) n RETURNING tenant_id, id""",
        (TENANT, users),
    ).fetchall()
    tenant_id, user_ids = int(rows[0]["tenant_id"]), sorted(int(r["id"]) for r in rows)
    ensure_embedding_space(conn, LocalEmbedder())
    conn.commit()
    register_vector_types(conn)
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (HNSW_INDEX,)).fetchone()
    assert row is not None
    return Setup(tenant_id, user_ids, str(row["indexdef"]))


# What was loaded, kept in memory for exact (numpy) nearest neighbours: user id -> (memory ids, float32 rows).
Corpus = dict[int, tuple[np.ndarray, np.ndarray]]


def memories_per_user(size: int, users: int) -> list[int]:
    return [size // users + (number < size % users) for number in range(users)]


def load(
    conn: Conn, setup: Setup, size: int, facts: Sequence[Fact], pool_vectors: np.ndarray, args: argparse.Namespace
) -> Corpus:
    """`size` memories of `facts` (pool vectors plus noise) for the users, bulk-loaded with the HNSW index dropped."""
    rng = np.random.default_rng(args.seed + size)
    now = datetime.now(UTC)
    users = setup.user_ids
    per_user = memories_per_user(size, len(users))

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
    for memory_id, (created, user_id, fact, key, vector) in enumerate(rows, start=1):
        ids, times = (memory_id, setup.tenant_id, user_id), [created] * 3  # created_at, updated_at, valid_from
        tags = list(fact.tags)
        mem_rows.append((*ids, fact.namespace, key, fact.value, fact.kind, tags, fact.event_time, *times, "bench"))
        text = embeddable_text({"namespace": fact.namespace, "key": key, "kind": fact.kind, "value": fact.value})
        digest = hashlib.sha256(text.encode()).hexdigest()
        chunk_rows.append((*ids, memory_id, text, len(text), digest, vector, created))
        by_user_ids[user_id].append(memory_id)
        by_user_vectors[user_id].append(vector)
        # The text link_entities() extracts from; facts repeat across users, so cache by text.
        source = f"{key.replace('-', ' ')}: {fact.value}"
        if source not in mentions_cache:
            mentions_cache[source] = [(m.name, m.normalized, m.entity_type) for m in extract_entities(source)]
        for name, normalized, entity_type in mentions_cache[source]:
            entity_key = (user_id, entity_type, normalized)
            if entity_key not in entities:
                entities[entity_key] = len(entity_rows) + 1
                entity_rows.append([len(entity_rows) + 1, setup.tenant_id, user_id, name, normalized, entity_type, 0])
            entity_id = entities[entity_key]
            entity_rows[entity_id - 1][6] += 1
            link_rows.add((memory_id, entity_id))

    # Binary COPY: each target's columns with their types.
    tables = (
        (
            "memories",
            "id tenant_id user_id namespace key value kind tags event_time created_at updated_at valid_from source",
            "int8 int8 int8 text text text text text[] timestamptz timestamptz timestamptz timestamptz text",
            mem_rows,
        ),
        (
            "memory_chunks",
            "id tenant_id user_id memory_id text end_char content_hash embedding created_at",
            "int8 int8 int8 int8 text int4 text vector timestamptz",
            chunk_rows,
        ),
        (
            "entities",
            "id tenant_id user_id canonical_name normalized_name entity_type mention_count",
            "int8 int8 int8 text text text int4",
            entity_rows,
        ),
        ("memory_entities", "memory_id entity_id", "int8 int8", sorted(link_rows)),
    )
    with conn.cursor() as cur:
        for table, columns, types, table_rows in tables:
            with cur.copy(f"COPY {table} ({', '.join(columns.split())}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types.split())
                for table_row in table_rows:
                    copy.write_row(table_row)
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


def run_searches(
    conn: Conn,
    setup: Setup,
    corpus: Corpus,
    queries: Sequence[tuple[str, np.ndarray]],  # question, its vector
    mode: str,
    count: int,
    warmup: int,
    rng: random.Random,
) -> dict[str, Any]:
    """`count` timed searches (after `warmup` untimed ones) of random users and questions, each in its own
    transaction, timed around the call (round trips, planning, execution and result building)."""
    # The vector mode: its leg alone, no minimum score, so the results are the leg's top `limit` and recall
    # is measurable (relative_floor is applied in Python after the query: the SQL and its cost are the same).
    options = SearchOptions(relative_floor=0.0, legs=("vector",)) if mode == "vector" else SearchOptions()
    latencies, results_per_search, recalls = [], [], []
    for number in range(warmup + count):
        user_id = rng.choice(setup.user_ids)
        text, query_vector = rng.choice(queries)
        vector = None if mode == "text" else query_vector.tolist()
        start = time.perf_counter()
        results = search(conn, Scope(setup.tenant_id, user_id), text, query_vector=vector, options=options)
        elapsed = (time.perf_counter() - start) * 1000
        conn.commit()
        if number < warmup:
            continue
        latencies.append(elapsed)
        results_per_search.append(len(results))
        if mode == "vector":
            recalls.append(vector_recall(corpus, user_id, query_vector, results, options.limit))
    return {
        **{f"p{q}_ms": round(percentile(latencies, q) or 0.0, 2) for q in (50, 95, 99)},
        "mean_ms": round(float(np.mean(latencies)), 2),
        "results": round(float(np.mean(results_per_search)), 1),
        "recall": round(float(np.mean(recalls)), 3) if recalls else None,
        "n": len(latencies),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.search_scale", __doc__, keep=True)
    parser.add_argument("--memories", type=int, default=10000, help="memories loaded")
    parser.add_argument("--users", type=int, default=100, help="users the memories are spread over")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per mode and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed searches before each mode")
    parser.add_argument("--pool", type=int, default=4000, help="distinct facts embedded with the real model")
    parser.add_argument("--questions", type=int, default=300, help="distinct held-out questions")
    parser.add_argument("--noise", type=float, default=0.25, help="expected norm of the noise added per memory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the HNSW build (as for a reindex)")
    args = parser.parse_args(argv)
    if args.memories < args.users or args.users < 1 or args.queries < 1:
        parser.error("need --users >= 1, --queries >= 1 and --memories >= --users")
    return args


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    size, rng = args.memories, random.Random(args.seed)
    print(f"embedding {args.pool} facts and {args.questions} questions ...", file=sys.stderr, flush=True)
    facts = generate_facts(rng, args.pool, datetime.now(UTC))
    questions = generate_questions(rng, args.questions, {f.value for f in facts})
    pool_vectors = embed([f.value for f in facts])
    queries = list(zip(questions, embed(questions), strict=True))
    # Other work on the machine inflates latencies: the load average is recorded so a reader can tell.
    config = {"memories": size, "users": args.users, "queries": args.queries, "pool": len(facts)}
    config.update(cpus=os.cpu_count(), loadavg_start=round(os.getloadavg()[0], 2))
    with cast(Conn, psycopg.connect(url, row_factory=dict_row)) as conn:
        setup = prepare(conn, args.users)
        print(f"[{size}] loading, building the HNSW index, VACUUM ANALYZE ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        corpus = load(conn, setup, size, facts, pool_vectors, args)
        load_s = time.perf_counter() - start
        build_s = build_index(conn, setup.hnsw_indexdef, args.maintenance_work_mem)
        sizes = relation_sizes(conn)
        conn.commit()
        postmaster = psutil.Process(conn.info.backend_pid).ppid()  # the embedded server's
        latency: dict[str, dict[str, Any]] = {}
        mrng = random.Random(args.seed + size)
        # PSS: the backends share shared_buffers, which every one's RSS counts again.
        with MemorySampler({"postgres": postmaster}, interval=1.0) as pg_memory:
            for mode in ("hybrid", "text", "vector"):
                latency[mode] = run_searches(conn, setup, corpus, queries, mode, args.queries, args.warmup, mrng)
    hybrid_p95 = latency["hybrid"]["p95_ms"]
    return {
        "hybrid_p95_ms": hybrid_p95,
        "meets_goal": hybrid_p95 <= GOAL_P95_MS,
        "goal_hybrid_p95_ms": GOAL_P95_MS,
        "load_s": round(load_s, 1),
        "hnsw_build_s": round(build_s, 1),
        "relation_mb": {name: megabytes(value) for name, value in sizes.items()},
        "postgres_memory": pg_memory.peaks["postgres"].figures(),
        "latency": latency,
        "config": {**config, "loadavg_end": round(os.getloadavg()[0], 2)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with BenchRun(keep=args.keep) as cleanup:
        report = run(args, cleanup.database(None, "engram-search-bench-"))
        title = f"engram search scale benchmark (goal: hybrid p95 <= {GOAL_P95_MS:g} ms)"
        emit(outline(title, report), report, True)  # always: the JSON line is this benchmark's record
        return 0


if __name__ == "__main__":
    sys.exit(main())
