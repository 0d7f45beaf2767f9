"""Hybrid search latency at scale: shared.memory.search.search() over 10k / 100k synthetic memories.

    python -m ops.bench.search_scale                          # sizes 10000,100000; own embedded Postgres
    python -m ops.bench.search_scale --sizes 100000 --skew 1  # a few heavy users instead of an even spread
    python -m ops.bench.search_scale --memories 1000000 --users 10000 --json   # one size
    python -m ops.bench.search_scale --database-url postgresql://.../scratch   # or ENGRAM_DATABASE_URL

Without a URL it starts an embedded Postgres (ops/embedded.py) in a temporary directory and stops it
on exit (also on Ctrl-C, SIGTERM or an error). A given database must be a scratch database: the
memory tables are truncated for every size (the run refuses if they hold another tenant's rows).

Corpus, per size N (tables truncated, so every size starts from clean relations):
- `--pool` distinct short facts are generated from 30 templates (people, food, work, travel, health,
  pets, media, directives, …) whose slots draw from vocabularies of 6–60 values, so a word's document
  frequency, and with it the selectivity of the full-text OR query, resembles real facts.
- `--users` users of one tenant share the N memories evenly (`--skew s`: user i gets a share
  ∝ 1/(i+1)^s). A user's memories are distinct pool facts while the pool suffices (repeats beyond);
  kind, namespace, key and tags follow the template (episodes get a `daily/<date>` namespace and an
  event_time); keys are unique per (user, namespace); valid_until is NULL; search_tsv is generated.
- Vectors: only the pool is embedded, with the real LocalEmbedder (MiniLM, 384 dims); embedding 100k
  texts on 2 cores would take many minutes. A memory's vector is its fact's vector plus isotropic
  Gaussian noise of expected norm `--noise` (0.25: cosine ≈ 0.97 to the clean vector), re-normalised.
  The noise keeps the ~25 copies of a fact held by different users from being identical points, which
  would give HNSW an unrealistically degenerate graph. Each memory has one chunk whose text is
  indexing.embeddable_text() of the memory (the vector ignores that text's key/namespace prefix).
- Entities: entity_extraction.extract_entities() over the text link_entities() uses, one entity per
  (user, type, normalised name) (the first-name/full-name merge is skipped), so the entity leg has
  real rows to probe. No transcript chunks.
- Creation times are spread over two years and rows are loaded in that order (ids too), so a user's
  chunks are scattered over the table as in production, not packed together.
- Binary COPY with the HNSW index dropped; then the index is re-created, timed, with exactly the
  definition ensure_embedding_space() created (read back from pg_indexes); VACUUM ANALYZE; CHECKPOINT.

Queries: held-out questions from question forms of the same templates (phrased unlike any stored
fact), embedded with the real model before timing. A sample is one search() call for a random user
and question in its own transaction, timed around the call (round trips, planning, execution and
result building; not the embedding). Modes:
- hybrid: question + its vector (what shared.memory.service does);
- text: question, query_vector=None (no vector leg);
- vector: question + its vector with SearchOptions(legs=("vector",)), and relative_floor 0 (a Python-side
  cut-off: same SQL) so recall@10 against the exact top 10 is measurable;
- hybrid/vector (<plan>): the vector plan the planner did not pick, forced for comparison: HNSW with
  `SET LOCAL enable_sort = off`, the exact scan by dropping the HNSW index; either way inside one
  transaction that is rolled back.
The vector leg's plan is shown with EXPLAIN ANALYZE for the median user (by memory count).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
import psycopg
from psycopg.rows import dict_row

from ops.bench.harness import BenchError, BenchRun, MemorySampler, bench_parser, emit, percentile, run_main, shown
from shared.embeddings import ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import LocalEmbedder
from shared.embeddings.space import forget_checked_spaces
from shared.infra.db import Conn
from shared.infra.migrate import apply_migrations
from shared.memory import search as search_module
from shared.memory.entity_extraction import extract_entities
from shared.memory.indexing import embeddable_text
from shared.memory.search import SearchOptions, SearchResult, search
from shared.memory.store import Scope

TENANT = "bench-search-scale"
HNSW_INDEX = "memory_chunks_embedding_hnsw"  # shared/embeddings/space.py INDEX_NAME
USER_INDEX = "memory_chunks_user_idx"  # the btree the planner may prefer for the vector leg
MEMORY_TABLES = ("memories", "memory_chunks", "entities", "memory_entities")
GOAL_P95_MS = 20.0  # the goal for hybrid search at 1M memories over 10k users
MB = 1024 * 1024


# ---------------------------------------------------------------------------------------------------
# Vocabulary and templates


def _w(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


# The words and sentence templates are data, beside this module.
_DATA = json.loads((Path(__file__).parent / "data" / "search_scale.json").read_text(encoding="utf-8"))
VOCAB: dict[str, list[str]] = {slot: _w(words) for slot, words in _DATA["vocab"].items()}

KEY_SAFE = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Template:
    kind: str
    namespace: str  # "{date}" is filled with the fact's event date
    key: str  # format string over the slots; normalised to lowercase-hyphen words
    text: str
    tags: tuple[str, ...]
    questions: tuple[str, ...]  # held-out question forms; their slots are filled independently

    @property
    def slots(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.text)


def _t(kind: str, namespace: str, key: str, text: str, tags: str, *questions: str) -> Template:
    return Template(kind, namespace, key, text, tuple(_w(tags)), questions)


TEMPLATES: tuple[Template, ...] = tuple(_t(*fields) for fields in _DATA["templates"])

# Questions that no template answers: real traffic has them, and they exercise the OR query with
# common words.
FREE_QUESTIONS: tuple[str, ...] = tuple(_DATA["free_questions"])


def _fill(rng: random.Random, text: str, values: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
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

    return re.sub(r"\{(\w+)\}", slot, text), values


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
        template = rng.choice(TEMPLATES)
        value, values = _fill(rng, template.text)
        if value in facts:
            continue
        key = KEY_SAFE.sub("-", _fill(rng, template.key, values)[0].lower()).strip("-")
        event_time = None
        namespace = template.namespace
        if "{date}" in namespace:
            event_time = now - timedelta(days=rng.randint(1, 720), hours=rng.randint(0, 23))
            namespace = namespace.replace("{date}", event_time.date().isoformat())
        facts[value] = Fact(template.kind, namespace, key, value, template.tags, event_time)
    return list(facts.values())


def generate_questions(rng: random.Random, count: int, exclude: set[str]) -> list[str]:
    questions: dict[str, None] = {}
    while len(questions) < count:
        if rng.random() < 0.05:
            question = rng.choice(FREE_QUESTIONS)
        else:
            question = _fill(rng, rng.choice(rng.choice(TEMPLATES).questions))[0]
        if question not in exclude:
            questions[question] = None
    return list(questions)


# ---------------------------------------------------------------------------------------------------
# Embeddings


def embed(texts: Sequence[str]) -> np.ndarray:
    """Real MiniLM vectors (normalised), as float32 rows."""
    return np.asarray(LocalEmbedder(batch_size=128).embed(list(texts)), dtype=np.float32)


def noisy(base: np.ndarray, noise_norm: float, rng: np.random.Generator) -> np.ndarray:
    """`base` rows plus isotropic Gaussian noise of expected norm `noise_norm`, re-normalised."""
    sigma = noise_norm / np.sqrt(base.shape[1])
    out = base + rng.normal(0.0, sigma, size=base.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


# ---------------------------------------------------------------------------------------------------
# Database set-up and loading


@dataclass
class Setup:
    tenant_id: int
    user_ids: list[int]
    hnsw_indexdef: str


def prepare(conn: Conn, users: int) -> Setup:
    apply_migrations(conn)  # leaves the connection in autocommit mode
    conn.autocommit = False
    foreign = conn.execute(
        """SELECT count(*) AS n FROM memories m JOIN tenants t ON t.id = m.tenant_id WHERE t.name <> %s""",
        (TENANT,),
    ).fetchone()
    if foreign is not None and foreign["n"]:
        raise BenchError(f"the database holds {foreign['n']} memories of other tenants; use a scratch database")
    row = conn.execute(
        "INSERT INTO tenants (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
        (TENANT,),
    ).fetchone()
    assert row is not None
    tenant_id = int(row["id"])
    user_ids = []
    for number in range(users):
        row = conn.execute(
            """INSERT INTO users (tenant_id, external_id) VALUES (%s, %s)
               ON CONFLICT (tenant_id, external_id) DO UPDATE SET updated_at = now() RETURNING id""",
            (tenant_id, f"user-{number:04d}"),
        ).fetchone()
        assert row is not None
        user_ids.append(int(row["id"]))
    conn.commit()
    # ensure_embedding_space refuses vectors it did not see being made, so it runs on empty tables:
    # it types the column as vector(384) and creates the HNSW index the product searches with.
    conn.execute(f"TRUNCATE {', '.join(MEMORY_TABLES)} RESTART IDENTITY CASCADE")
    conn.commit()
    ensure_embedding_space(conn, LocalEmbedder())
    conn.commit()
    register_vector_types(conn)
    row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (HNSW_INDEX,)).fetchone()
    if row is None:
        # An interrupted earlier run left its space without the index (it is dropped while loading):
        # this is a scratch database, so let the product set the space up afresh, index included.
        conn.execute("DELETE FROM embedding_space")
        conn.commit()
        forget_checked_spaces()
        ensure_embedding_space(conn, LocalEmbedder())
        conn.commit()
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (HNSW_INDEX,)).fetchone()
    if row is None:
        raise BenchError(f"ensure_embedding_space did not create {HNSW_INDEX}")
    return Setup(tenant_id, user_ids, str(row["indexdef"]))


@dataclass
class Corpus:
    """What was loaded, kept in memory for exact (numpy) nearest neighbours per user."""

    memory_ids: dict[int, np.ndarray] = field(default_factory=dict)  # user id -> memory ids
    vectors: dict[int, np.ndarray] = field(default_factory=dict)  # user id -> float32 rows, same order


def memories_per_user(size: int, users: int, skew: float) -> list[int]:
    """Even split for skew 0; else Zipf-like: user i gets a share proportional to 1 / (i + 1) ** skew."""
    weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** skew
    counts = np.maximum(1, np.floor(weights / weights.sum() * size)).astype(int)
    remainder = size - int(counts.sum())
    if remainder >= 0:
        counts[:remainder] += 1  # the rounding remainder goes to the heaviest users
    else:
        counts[0] += remainder  # the "at least one" floor overshot: the heaviest user gives it back
    return [int(c) for c in counts]


@dataclass
class _Row:
    created: datetime
    user_id: int
    fact: Fact
    key: str
    vector: np.ndarray


def load(
    conn: Conn,
    setup: Setup,
    size: int,
    facts: Sequence[Fact],
    pool_vectors: np.ndarray,
    noise_norm: float,
    skew: float,
    seed: int,
    now: datetime,
) -> Corpus:
    rng = np.random.default_rng(seed)
    users = setup.user_ids
    per_user = memories_per_user(size, len(users), skew)

    conn.execute(f"TRUNCATE {', '.join(MEMORY_TABLES)} RESTART IDENTITY CASCADE")
    # Bulk load first, index after: the build is then one pass (what a restore or reindex does).
    conn.execute(f"DROP INDEX IF EXISTS {HNSW_INDEX}")

    rows: list[_Row] = []
    for user_id, count in zip(users, per_user, strict=True):
        # Distinct facts while the pool suffices; a heavier user repeats facts (as distinct noisy vectors).
        chosen = rng.choice(len(facts), size=count, replace=count > len(facts))
        keys: set[tuple[str, str]] = set()
        for index, vector in zip(chosen, noisy(pool_vectors[chosen], noise_norm, rng), strict=True):
            fact = facts[int(index)]
            key, suffix = fact.key, 1
            while (fact.namespace, key) in keys:  # a second "sister-maria-home": keys stay unique per user
                suffix += 1
                key = f"{fact.key}-{suffix}"
            keys.add((fact.namespace, key))
            created = now - timedelta(seconds=int(rng.integers(0, 730 * 86400)))
            rows.append(_Row(created, user_id, fact, key, vector))
    # Ids and physical order follow arrival time, interleaving users as production writes do. Loading
    # user by user would put each user's chunks on a few adjacent pages and flatter the per-user scans.
    rows.sort(key=lambda r: r.created)

    mem_rows: list[tuple[Any, ...]] = []
    chunk_rows: list[tuple[Any, ...]] = []
    entity_rows: list[list[Any]] = []
    link_rows: set[tuple[int, int]] = set()  # one link per (memory, entity), as the product's ON CONFLICT
    entities: dict[tuple[int, str, str], int] = {}
    mentions_cache: dict[str, list[tuple[str, str, str]]] = {}
    by_user_ids: dict[int, list[int]] = {u: [] for u in users}
    by_user_vectors: dict[int, list[np.ndarray]] = {u: [] for u in users}
    for memory_id, row in enumerate(rows, start=1):
        fact = row.fact
        mem_rows.append(
            (
                memory_id,
                setup.tenant_id,
                row.user_id,
                fact.namespace,
                row.key,
                fact.value,
                fact.kind,
                list(fact.tags),
                fact.event_time,
                row.created,
                row.created,
                row.created,
                "bench",
            )
        )
        text = embeddable_text({"namespace": fact.namespace, "key": row.key, "kind": fact.kind, "value": fact.value})
        chunk_rows.append(
            (
                memory_id,
                setup.tenant_id,
                row.user_id,
                memory_id,
                text,
                len(text),
                hashlib.sha256(text.encode()).hexdigest(),
                row.vector,
                row.created,
            )
        )
        by_user_ids[row.user_id].append(memory_id)
        by_user_vectors[row.user_id].append(row.vector)
        # The text link_entities() extracts from; facts repeat across users, so cache by text.
        source = f"{row.key.replace('-', ' ')}: {fact.value}"
        if source not in mentions_cache:
            mentions_cache[source] = [(m.name, m.normalized, m.entity_type) for m in extract_entities(source)]
        for name, normalized, entity_type in mentions_cache[source]:
            entity_key = (row.user_id, entity_type, normalized)
            if entity_key not in entities:
                entities[entity_key] = len(entity_rows) + 1
                entity_rows.append(
                    [len(entity_rows) + 1, setup.tenant_id, row.user_id, name, normalized, entity_type, 0]
                )
            entity_id = entities[entity_key]
            entity_rows[entity_id - 1][6] += 1
            link_rows.add((memory_id, entity_id))

    with conn.cursor() as cur:
        _copy(
            cur,
            "memories (id, tenant_id, user_id, namespace, key, value, kind, tags, event_time, created_at, updated_at,"
            " valid_from, source)",
            [
                "int8",
                "int8",
                "int8",
                "text",
                "text",
                "text",
                "text",
                "text[]",
                "timestamptz",
                "timestamptz",
                "timestamptz",
                "timestamptz",
                "text",
            ],
            mem_rows,
        )
        _copy(
            cur,
            "memory_chunks (id, tenant_id, user_id, memory_id, text, end_char, content_hash, embedding, created_at)",
            ["int8", "int8", "int8", "int8", "text", "int4", "text", "vector", "timestamptz"],
            chunk_rows,
        )
        _copy(
            cur,
            "entities (id, tenant_id, user_id, canonical_name, normalized_name, entity_type, mention_count)",
            ["int8", "int8", "int8", "text", "text", "text", "int4"],
            entity_rows,
        )
        _copy(cur, "memory_entities (memory_id, entity_id)", ["int8", "int8"], sorted(link_rows))
    # Explicit ids were loaded; later inserts (none here) would otherwise collide.
    for table in ("memories", "memory_chunks", "entities"):
        conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    conn.commit()
    corpus = Corpus()
    for user_id in users:
        corpus.memory_ids[user_id] = np.asarray(by_user_ids[user_id], dtype=np.int64)
        corpus.vectors[user_id] = np.stack(by_user_vectors[user_id])
    return corpus


def _copy(cur: psycopg.Cursor[Any], target: str, types: list[str], rows: Sequence[Sequence[Any]]) -> None:
    with cur.copy(f"COPY {target} FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def build_index(conn: Conn, indexdef: str, maintenance_work_mem: str) -> float:
    # pgvector builds the graph in memory while it fits maintenance_work_mem and falls back to a far
    # slower on-disk build after; Postgres's 64 MB default holds ~40k vectors of 384 dims.
    conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
    start = time.perf_counter()
    conn.execute(indexdef)
    conn.commit()
    return time.perf_counter() - start


def postmaster_pid(conn: Conn) -> int | None:
    """The server's postmaster, when it runs on this machine (its memory is then measurable)."""
    row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
    conn.rollback()
    try:
        backend = psutil.Process(int(row["pid"])) if row is not None else None
        parent = backend.parent() if backend is not None else None
    except psutil.Error:
        return None  # a remote server: its pid means nothing here
    return parent.pid if parent is not None else None


@contextlib.contextmanager
def postgres_memory(conn: Conn) -> Iterator[dict[str, Any]]:
    """Peak RSS/PSS of the Postgres process tree while the body runs ({} for a remote server)."""
    figures: dict[str, Any] = {}
    pid = postmaster_pid(conn)
    if pid is None:
        yield figures
        return
    # PSS: the backends share shared_buffers, which every one's RSS counts again.
    with MemorySampler({"postgres": pid}, interval=1.0) as sampler:
        yield figures
    figures.update(sampler.peaks["postgres"].figures())


def vacuum_analyze(url: str) -> None:
    # VACUUM cannot run in a transaction; it also sets the visibility map and hint bits a freshly
    # COPYed table lacks, so the first measured queries do not pay for them.
    with psycopg.connect(url, autocommit=True) as conn:
        for table in MEMORY_TABLES:
            conn.execute(f"VACUUM (ANALYZE) {table}")
        # The load and the index build leave hundreds of MB of dirty buffers; without a checkpoint
        # the measured reads would each first write one back (steady-state reads do not).
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            print("warning: no privilege to CHECKPOINT; early samples may include buffer write-back", file=sys.stderr)


def relation_sizes(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        """SELECT c.relname AS name, pg_total_relation_size(c.oid) AS total, pg_relation_size(c.oid) AS heap
           FROM pg_class c WHERE c.relname = ANY(%s) ORDER BY c.relname""",
        (list(MEMORY_TABLES[:2]),),
    ).fetchall()
    sizes = {f"{r['name']} (total)": int(r["total"]) for r in rows}
    indexes = conn.execute(
        """SELECT i.relname AS name, pg_relation_size(i.oid) AS size
           FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
           WHERE t.relname = ANY(%s) ORDER BY t.relname, i.relname""",
        (list(MEMORY_TABLES[:2]),),
    ).fetchall()
    sizes.update({r["name"]: int(r["size"]) for r in indexes})
    return sizes


# ---------------------------------------------------------------------------------------------------
# Measuring


@dataclass(frozen=True)
class Query:
    text: str
    vector: np.ndarray


@dataclass
class Samples:
    latencies_ms: list[float] = field(default_factory=list)
    user_memories: list[int] = field(default_factory=list)  # how many memories the sample's user has
    results: list[int] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        p50, p95, p99 = (percentile(self.latencies_ms, q) or 0.0 for q in (50, 95, 99))
        return {
            "p50_ms": round(p50, 2),
            "p95_ms": round(p95, 2),
            "p99_ms": round(p99, 2),
            "mean_ms": round(float(np.mean(self.latencies_ms)), 2),
            "results": round(float(np.mean(self.results)), 1),
            "recall": round(float(np.mean(self.recalls)), 3) if self.recalls else None,
            "n": len(self.latencies_ms),
            # With --skew the tail belongs to particular users; this says which.
            "slowest": [
                {"ms": round(ms, 1), "user_memories": n}
                for ms, n in sorted(zip(self.latencies_ms, self.user_memories, strict=True), reverse=True)[:5]
            ],
        }


def mode_options(mode: str) -> SearchOptions:
    if mode == "vector":
        # Only the vector leg, and no minimum score, so the results are the leg's top `limit` and recall
        # is measurable; relative_floor is applied in Python after the query: the SQL and its cost are the same.
        return SearchOptions(relative_floor=0.0, legs=("vector",))
    return SearchOptions()


def vector_recall(corpus: Corpus, user_id: int, vector: np.ndarray, results: Sequence[SearchResult], k: int) -> float:
    """Share of the exact top-k (by cosine over the user's vectors) that the search returned.

    A returned memory counts when its similarity reaches the exact k-th best (minus float32 rounding),
    so a tie at the boundary resolved the other way is not a miss."""
    similarity = corpus.vectors[user_id] @ vector
    k = min(k, len(similarity))
    kth = float(np.sort(similarity)[-k])
    position = {int(memory_id): i for i, memory_id in enumerate(corpus.memory_ids[user_id])}
    hits = sum(1 for r in results if r.id is not None and float(similarity[position[r.id]]) >= kth - 1e-5)
    return min(hits, k) / k


def run_searches(
    conn: Conn,
    setup: Setup,
    corpus: Corpus,
    queries: Sequence[Query],
    mode: str,
    count: int,
    warmup: int,
    rng: random.Random,
    *,
    one_transaction: bool = False,
) -> Samples:
    """`count` timed searches (after `warmup` untimed ones), each in its own transaction unless
    `one_transaction` (the caller's, e.g. `forced_plan`)."""
    options = mode_options(mode)
    samples = Samples()
    for number in range(warmup + count):
        user_id = rng.choice(setup.user_ids)
        query = rng.choice(queries)
        scope = Scope(setup.tenant_id, user_id)
        vector = None if mode == "text" else query.vector.tolist()
        start = time.perf_counter()
        results: list[SearchResult] = search(conn, scope, query.text, query_vector=vector, options=options)
        elapsed = (time.perf_counter() - start) * 1000
        if not one_transaction:
            conn.commit()
        if number < warmup:
            continue
        samples.latencies_ms.append(elapsed)
        samples.user_memories.append(len(corpus.memory_ids[user_id]))
        samples.results.append(len(results))
        if mode == "vector":
            samples.recalls.append(vector_recall(corpus, user_id, query.vector, results, options.limit))
    return samples


# Every alternative to the HNSW scan sorts by distance; with sorts disabled the planner takes the
# HNSW scan. (Dropping the btree is not enough: it then picks a seq scan or another index + sort.)
FORCE_HNSW = "SET LOCAL enable_sort = off"
FORCE_EXACT = f"DROP INDEX {HNSW_INDEX}"


@contextlib.contextmanager
def forced_plan(conn: Conn, statement: str) -> Iterator[None]:
    """Run `statement` in a transaction that is rolled back at the end (so a dropped index comes
    back): whatever runs inside must not commit (run_searches(one_transaction=True))."""
    conn.commit()
    conn.execute(statement)
    try:
        yield
    finally:
        conn.rollback()


class _ExplainingConn:
    """Delegates to a connection; the main search statement is first run under EXPLAIN ANALYZE."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.plan: list[str] = []

    def execute(self, query: Any, params: Any = None) -> Any:
        if isinstance(query, str) and query.lstrip().startswith("WITH"):
            rows = self._conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query, params).fetchall()
            self.plan = [str(next(iter(r.values()))) for r in rows]
        return self._conn.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def explain(conn: Conn, setup: Setup, user_id: int, query: Query, mode: str) -> list[str]:
    """The plan of the search() statement for one query, as executed (EXPLAIN ANALYZE)."""
    spy = _ExplainingConn(conn)
    vector = None if mode == "text" else query.vector.tolist()
    options = mode_options(mode)
    # No rollback here: the caller's transaction may be forced_plan's.
    search(cast(Conn, spy), Scope(setup.tenant_id, user_id), query.text, query_vector=vector, options=options)
    return spy.plan


def subplan(plan: Sequence[str], cte: str) -> list[str]:
    """The lines of `CTE <cte>` and everything indented below it."""
    for start, line in enumerate(plan):
        if line.strip().startswith(f"CTE {cte}"):
            indent = len(line) - len(line.lstrip())
            end = start + 1
            while end < len(plan) and len(plan[end]) - len(plan[end].lstrip()) > indent:
                end += 1
            return list(plan[start:end])
    return []


_VECTOR_LITERAL = re.compile(r"'\[[^\]]*\]'")


def shorten(lines: Sequence[str]) -> list[str]:
    """Plan lines with the 384-number query vector literal elided."""
    return [_VECTOR_LITERAL.sub("'[...]'", line) for line in lines]


def classify(lines: Sequence[str]) -> str:
    """How the vector leg found its rows."""
    text = "\n".join(lines)
    if HNSW_INDEX in text:
        return "hnsw"
    if USER_INDEX in text:
        return "btree+sort"
    return "seqscan+sort" if "Seq Scan" in text else "other+sort"


# ---------------------------------------------------------------------------------------------------
# Report


def render(report: dict[str, Any]) -> str:
    config = report["config"]
    lines = [
        f"engram search scale benchmark: {config['users']} users (skew {config['skew']:g}), {config['queries']} "
        f"queries per mode, {config['cpus']} CPUs (load avg {config['loadavg_start']} -> {config['loadavg_end']}), "
        f"Postgres {config['server_version']}, shared_buffers {config['shared_buffers']}",
        f"corpus: {config['pool']} facts embedded with MiniLM + noise {config['noise_norm']:g}; "
        f"{config['questions']} held-out questions; vector mode: vector leg only, relative_floor 0, recall@10 vs exact",
        "",
        f"{'size':>8} {'mode':<18} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'results':>8} "
        f"{'recall':>7}",
    ]
    for size in report["sizes"]:
        for mode, stats in size["latency"].items():
            recall = shown(stats["recall"], ".3f")
            lines.append(
                f"{size['memories']:>8} {mode:<18} {shown(stats['p50_ms']):>8} {shown(stats['p95_ms']):>8} "
                f"{shown(stats['p99_ms']):>8} {shown(stats['mean_ms']):>8} {stats['results']:>8} {recall:>7}"
            )
        lines.append("")
    lines.append(f"{'size':>8} {'load s':>8} {'hnsw build s':>13}  vector plan (planner's choice)")
    for size in report["sizes"]:
        build = f"{size['load_s']:>8.1f} {size['hnsw_build_s']:>13.1f}"
        lines.append(f"{size['memories']:>8} {build}  {size['vector_plan']}")
    lines.append("")
    names = list(report["sizes"][-1]["relation_bytes"])
    lines.append(f"{'relation (MB)':<32}" + "".join(f"{size['memories']:>10}" for size in report["sizes"]))
    for name in names:
        values = [size["relation_bytes"].get(name) for size in report["sizes"]]
        lines.append(f"{name:<32}" + "".join("         -" if v is None else f"{v / MB:>10.1f}" for v in values))
    for size in report["sizes"]:
        lines.append("")
        lines.append(
            f"vector leg at {size['memories']}, user with {size['probe_user_memories']} memories, "
            f"hybrid {size['probe_query']!r} (EXPLAIN ANALYZE):"
        )
        lines.extend(f"    {line}" for line in size["vector_plan_lines"])
        lines.append(f"  the same, forced with {size['forced_plan']}:")
        lines.extend(f"    {line}" for line in size["forced_plan_lines"])
    for size in report["sizes"]:
        memory = size["postgres_memory"]
        if memory:
            lines.append(
                f"Postgres while searching at {size['memories']}: peak RSS {memory['peak_rss_mb']} MB, "
                f"PSS {memory['peak_pss_mb']} MB ({memory['processes']} processes)"
            )
    hybrid = report["sizes"][-1]["latency"]["hybrid"]["p95_ms"]
    verdict = "meets" if hybrid <= GOAL_P95_MS else "MISSES"
    lines.append("")
    lines.append(
        f"goal: hybrid p95 <= {GOAL_P95_MS:g} ms at {report['sizes'][-1]['memories']} memories: {verdict} ({hybrid} ms)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser(
        "ops.bench.search_scale", __doc__, keep="keep the embedded Postgres data directory"
    )  # accepted like every benchmark's; this one prints its JSON line either way
    size_group = parser.add_mutually_exclusive_group()
    size_group.add_argument("--sizes", default="10000,100000", help="comma-separated memory counts")
    size_group.add_argument("--memories", type=int, help="one memory count (instead of --sizes)")
    parser.add_argument("--users", type=int, default=100, help="users the memories are spread over")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per mode and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed searches before each mode")
    parser.add_argument("--pool", type=int, default=4000, help="distinct facts embedded with the real model")
    parser.add_argument("--questions", type=int, default=300, help="distinct held-out questions")
    parser.add_argument("--noise", type=float, default=0.25, help="expected norm of the noise added per memory")
    parser.add_argument(
        "--skew", type=float, default=0.0, help="0 = memories spread evenly; s > 0 = user i holds ~1/(i+1)^s"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--maintenance-work-mem",
        default="2GB",
        help="maintenance_work_mem for the HNSW build (as for a reindex)",
    )
    parser.add_argument(
        "--database-url", default=os.environ.get("ENGRAM_DATABASE_URL"), help="a scratch database (default: embedded)"
    )
    args = parser.parse_args(argv)
    if args.memories is not None:
        args.size_list = [args.memories]
    else:
        try:
            args.size_list = [int(s) for s in args.sizes.split(",") if s.strip()]
        except ValueError:
            parser.error("--sizes must be comma-separated integers")
    if not args.size_list or min(args.size_list) < args.users or args.users < 1 or args.queries < 1:
        parser.error("need --users >= 1, --queries >= 1 and every size >= --users")
    return args


def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    rng = random.Random(args.seed)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731

    log(f"generating {args.pool} facts and {args.questions} questions ...")
    facts = generate_facts(rng, args.pool, now)
    questions = generate_questions(rng, args.questions, {f.value for f in facts})
    start = time.perf_counter()
    pool_vectors = embed([f.value for f in facts])
    queries = [Query(q, v) for q, v in zip(questions, embed(questions), strict=True)]
    embed_s = time.perf_counter() - start
    log(f"embedded {len(facts) + len(questions)} texts with MiniLM in {embed_s:.1f}s")

    conn = cast(Conn, psycopg.connect(url, row_factory=dict_row))
    try:
        setup = prepare(conn, args.users)
        settings = conn.execute(
            "SELECT current_setting('server_version') AS v, current_setting('shared_buffers') AS sb"
        ).fetchone()
        assert settings is not None
        conn.commit()
        report: dict[str, Any] = {
            "config": {
                "users": args.users,
                "queries": args.queries,
                "pool": len(facts),
                "questions": len(queries),
                "noise_norm": args.noise,
                "skew": args.skew,
                "loadavg_start": round(os.getloadavg()[0], 2),
                "embed_s": round(embed_s, 1),
                "cpus": os.cpu_count(),
                "server_version": settings["v"],
                "shared_buffers": settings["sb"],
                "maintenance_work_mem": args.maintenance_work_mem,
                "hnsw_indexdef": setup.hnsw_indexdef,
                # search.py is under active change: which version of it these numbers belong to.
                "search_py_sha256": hashlib.sha256(Path(search_module.__file__ or "").read_bytes()).hexdigest()[:16],
            },
            "sizes": [],
        }
        for size in args.size_list:
            log(f"[{size}] loading ...")
            start = time.perf_counter()
            corpus = load(conn, setup, size, facts, pool_vectors, args.noise, args.skew, args.seed + size, now)
            load_s = time.perf_counter() - start
            log(f"[{size}] loaded in {load_s:.1f}s; building the HNSW index ...")
            build_s = build_index(conn, setup.hnsw_indexdef, args.maintenance_work_mem)
            log(f"[{size}] index built in {build_s:.1f}s; VACUUM ANALYZE ...")
            vacuum_analyze(url)
            sizes = relation_sizes(conn)
            conn.commit()

            # A typical user: the median by memory count (they are all alike unless --skew).
            probe, probe_user = queries[0], setup.user_ids[len(setup.user_ids) // 2]
            vector_lines = shorten(subplan(explain(conn, setup, probe_user, probe, "hybrid"), "vec_raw"))
            conn.rollback()
            vector_plan = classify(vector_lines)

            latency: dict[str, dict[str, Any]] = {}
            mrng = random.Random(args.seed + size)
            with postgres_memory(conn) as pg_memory:
                for mode in ("hybrid", "text", "vector"):
                    log(f"[{size}] measuring {mode} ...")
                    samples = run_searches(conn, setup, corpus, queries, mode, args.queries, args.warmup, mrng)
                    latency[mode] = samples.summary()
            # The other vector plan, forced, so both are measured whatever the planner picks.
            force = FORCE_EXACT if vector_plan == "hnsw" else FORCE_HNSW
            with forced_plan(conn, force):
                other_lines = shorten(subplan(explain(conn, setup, probe_user, probe, "hybrid"), "vec_raw"))
            other = classify(other_lines)
            for mode in ("hybrid", "vector"):
                log(f"[{size}] measuring {mode} with the {other} plan forced ({force}) ...")
                with forced_plan(conn, force):
                    samples = run_searches(
                        conn, setup, corpus, queries, mode, args.queries, args.warmup, mrng, one_transaction=True
                    )
                latency[f"{mode} ({other})"] = samples.summary()

            report["sizes"].append(
                {
                    "memories": size,
                    "load_s": round(load_s, 1),
                    "hnsw_build_s": round(build_s, 1),
                    "relation_bytes": sizes,
                    "postgres_memory": pg_memory,
                    "vector_plan": vector_plan,
                    "vector_plan_lines": vector_lines,
                    "forced_plan": force,
                    "forced_plan_lines": other_lines,
                    "probe_query": probe.text,
                    "probe_user_memories": len(corpus.memory_ids[probe_user]),
                    "latency": latency,
                }
            )
        # Other work on the machine inflates latencies; recorded so a reader can tell.
        report["config"]["loadavg_end"] = round(os.getloadavg()[0], 2)
        return report
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    with BenchRun(keep=args.keep) as cleanup:
        report = run(args, cleanup.database(args.database_url, "engram-search-bench-"))
        emit(render(report), report, True)  # always: the JSON line is this benchmark's record
        return 0


if __name__ == "__main__":
    sys.exit(main())
