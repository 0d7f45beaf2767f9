"""Retrieval benchmark on LoCoMo-format conversations: recall@5/10 of memory search (text leg,
vector leg, and hybrid as the product searches), per question category; `--mode e2e` runs ops/bench/locomo_e2e.py.
docs/benchmarks.md has the protocol and the figures.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgvector import Vector

from ops.bench.harness import BenchError, BenchRun, bench_parser, distribution, emit, outline, ratio, rounded, run_main
from ops.bench.locomo_data import CATEGORIES, Conversation, Turn, load_conversations, session_messages
from shared.access.auth import ensure_tenant
from shared.embeddings import Embedder, embed_texts, ensure_embedding_space
from shared.infra.config import get_settings
from shared.infra.db import Conn, connect
from shared.infra.logging import configure_logging
from shared.infra.migrate import apply_migrations
from shared.memory import service
from shared.memory.indexing import embedding_inputs, index_memory
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import CONTEXT_KEY, MAX_CONTEXT_CHARS, MemoryInput
from shared.memory.search import Leg, SearchOptions, SearchResult, search
from shared.memory.service import options_from_settings
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user
from shared.turns.ingest import IngestMessage, ingest_messages

K_VALUES = (5, 10)
LIMIT = 10  # results asked of search: the deepest cut-off measured
CONTEXT_BEFORE, CONTEXT_AFTER = 2, 1  # neighbouring turns stored as each episode's context
MODES: dict[str, tuple[Leg, ...] | None] = {"text": ("text",), "vector": ("vector",), "hybrid": None}


def recall_at(ranked: Sequence[frozenset[str]], evidence: set[str], k: int) -> float:
    found = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(found & evidence) / len(evidence)


@dataclass
class ModeStats:
    scores: dict[str, list[float]] = field(default_factory=dict)  # "recall@5|all" → per-question values
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, category: int, metric: str, value: float) -> None:
        for group in ("all", str(category)):
            self.scores.setdefault(f"{metric}|{group}", []).append(value)

    def count(self, group: str) -> int:
        return len(self.scores.get(f"recall@10|{group}", []))

    def mean(self, metric: str, group: str = "all") -> float | None:
        values = self.scores.get(f"{metric}|{group}")
        return sum(values) / len(values) if values else None


METRICS = tuple(f"recall@{k}" for k in K_VALUES)


@dataclass
class Ingested:
    scope: Scope
    dia_ids: dict[int, set[str]]  # memory id (episodes) or message id (units) → the turns whose text it holds

    def found(self, result: SearchResult) -> frozenset[str]:
        key = result.id if result.source == "memory" else result.message_id
        return frozenset(self.dia_ids.get(key, ())) if key is not None else frozenset()


@dataclass
class IngestTimes:
    turns: int = 0
    store_seconds: float = 0.0
    index_seconds: float = 0.0
    rejected: int = 0
    deduplicated: int = 0


def neighbour_context(turns: Sequence[Turn], index: int) -> str:
    """The turns around this one in its session, in order: what an episode writer keeps as `metadata.context`."""
    turn = turns[index]
    window = range(index - CONTEXT_BEFORE, index + CONTEXT_AFTER + 1)
    neighbours = [
        turns[i].text for i in window if i != index and 0 <= i < len(turns) and turns[i].session == turn.session
    ]
    # The store refuses an oversize context rather than cutting it; cutting is the writer's call.
    return "\n".join(neighbours)[:MAX_CONTEXT_CHARS]


def ingest(
    conn: Conn, embedder: Embedder, tenant_id: int, conversation: Conversation, times: IngestTimes, units: bool = False
) -> Ingested:
    """The conversation stored (as messages, each a transcript unit, or as episodes), then embedded and indexed."""
    ingested = Ingested(Scope(tenant_id, ensure_user(conn, tenant_id, conversation.sample_id)), {})
    started = time.perf_counter()
    (_store_units if units else _store_episodes)(conn, conversation, ingested, times)
    conn.commit()
    times.store_seconds += time.perf_counter() - started
    times.turns += len(conversation.turns)
    started = time.perf_counter()
    ensure_embedding_space(conn, embedder)
    conn.commit()  # the first use alters memory_chunks; keep that lock short
    (_index_units if units else _index_episodes)(conn, embedder, ingested)
    conn.commit()
    times.index_seconds += time.perf_counter() - started
    return ingested


def _store_units(conn: Conn, conversation: Conversation, ingested: Ingested, times: IngestTimes) -> None:
    for number, messages in sorted(session_messages(conversation).items()):
        result = ingest_messages(
            conn,
            tenant_id=ingested.scope.tenant_id,
            user_external_id=conversation.sample_id,
            session_key=f"session-{number}",
            messages=[
                IngestMessage(m["role"], m["content"], m.get("created_at"), m.get("name"), m["idempotency_key"])
                for m in messages
            ],
        )
        for message, message_id in zip(messages, result.message_ids, strict=True):
            ingested.dia_ids.setdefault(message_id, set()).add(message["idempotency_key"])


def _index_units(conn: Conn, embedder: Embedder, ingested: Ingested) -> None:
    units = conn.execute(
        "SELECT id, text FROM memory_chunks WHERE user_id = %s AND message_id IS NOT NULL AND embedding IS NULL",
        (ingested.scope.user_id,),
    ).fetchall()
    vectors = embed_texts(conn, embedder, [unit["text"] for unit in units], batch_size=256)
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE memory_chunks SET embedding = %s, embedded_at = now() WHERE id = %s",
            [(Vector(vector), unit["id"]) for unit, vector in zip(units, vectors, strict=True)],
        )


def _store_episodes(conn: Conn, conversation: Conversation, ingested: Ingested, times: IngestTimes) -> None:
    for index, turn in enumerate(conversation.turns):
        item = MemoryInput(
            key=turn.dia_id,
            value=turn.text,
            kind="episode",
            event_time=turn.event_time,
            metadata={
                "dia_id": turn.dia_id,
                "session": turn.session,
                "speaker": turn.speaker,
                CONTEXT_KEY: neighbour_context(conversation.turns, index),
            },
        )
        try:
            result = store_memory(conn, ingested.scope, item, "locomo-bench")
        except MemoryRejected:
            times.rejected += 1
            continue
        times.deduplicated += result.action != "added"
        ingested.dia_ids.setdefault(int(result.memory["id"]), set()).add(turn.dia_id)


def _index_episodes(conn: Conn, embedder: Embedder, ingested: Ingested) -> None:
    ids = sorted(ingested.dia_ids)
    rows = conn.execute(
        "SELECT id, namespace, key, value, kind, metadata FROM memories WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    # One batched call fills the embedding cache; index_memory then finds every vector there.
    embed_texts(conn, embedder, [text for row in rows for _, text in embedding_inputs(row)], batch_size=256)
    for memory_id in ids:
        index_memory(conn, embedder, memory_id)


def options_for(mode: str) -> SearchOptions:
    options = options_from_settings(get_settings(), LIMIT)
    legs = MODES[mode]
    if legs is not None:
        options.legs = legs
        # A lone leg is measured by its ranking alone: the relative floor is a hybrid relevance cut.
        options.relative_floor = 0.0
    return options


def evaluate(
    conn: Conn,
    embedder: Embedder,
    conversation: Conversation,
    ingested: Ingested,
    stats: dict[str, ModeStats],
    embed_ms: list[float],
) -> None:
    for question in conversation.questions:
        started = time.perf_counter()
        vector = embed_texts(conn, embedder, [question.text], batch_size=1)[0]
        embed_ms.append((time.perf_counter() - started) * 1000)
        # The product's path embeds the question itself (cached): done here, outside its timing.
        service.query_vector(conn, question.text)
        evidence = set(question.evidence)
        for mode in MODES:
            options = options_for(mode)
            started = time.perf_counter()
            if mode == "hybrid":
                results = service.search_memories(conn, ingested.scope, question.text, limit=LIMIT)
            else:
                text_only = mode == "text"
                results = search(
                    conn, ingested.scope, question.text, query_vector=None if text_only else vector, options=options
                )
            stats[mode].latencies_ms.append((time.perf_counter() - started) * 1000)
            conn.commit()  # search sets transaction-local HNSW options; start each query afresh
            ranked = [ingested.found(r) for r in results]
            for k in K_VALUES:
                stats[mode].add(question.category, f"recall@{k}", recall_at(ranked, evidence, k))


def summary(stats: dict[str, ModeStats], times: IngestTimes, embed_ms: list[float]) -> dict[str, Any]:
    """Per mode the means over every question (the keys the docs name), then per category and latency."""
    out: dict[str, Any] = {}
    for mode, s in stats.items():
        out[mode] = {metric: round(s.mean(metric) or 0.0, 4) for metric in METRICS}
        out[mode]["by_category"] = {
            name: {metric: rounded(s.mean(metric, str(c)), 4) for metric in METRICS}
            for c, name in CATEGORIES.items()
            if s.count(str(c))
        }
        out[mode]["search_ms"] = distribution(s.latencies_ms, (50, 95))
    asked = stats["hybrid"]
    out["questions"] = {"all": asked.count("all"), **{n: asked.count(str(c)) for c, n in CATEGORIES.items()}}
    out["ingest"] = {
        "turns": times.turns,
        "store_s": round(times.store_seconds, 1),
        "store_turns_per_s": ratio(times.turns, times.store_seconds, 0),
        "embed_index_s": round(times.index_seconds, 1),
        "embed_index_turns_per_s": ratio(times.turns, times.index_seconds, 0),
        "deduplicated": times.deduplicated,
        "rejected": times.rejected,
    }
    out["query_embedding_ms"] = distribution(embed_ms, (50, 95))
    return out


def read_conversations(args: argparse.Namespace) -> list[Conversation]:
    """The file's conversations (every LoCoMo benchmark parses it the same way), cut to --limit-conversations."""
    try:
        conversations = load_conversations(Path(args.file))[: args.limit_conversations]
    except (TypeError, AttributeError, ValueError) as exc:
        raise BenchError(f"{args.file}: not a LoCoMo-format JSON file ({exc})") from exc
    if not conversations:
        raise BenchError("no conversations to run")
    return conversations


def run(args: argparse.Namespace, conversations: list[Conversation]) -> int:
    url = args.database_url or get_settings().database_url
    embedder = service.process_embedder()  # the one the product's search embeds questions with
    stats = {mode: ModeStats() for mode in MODES}
    times = IngestTimes()
    embed_ms: list[float] = []
    with BenchRun() as cleanup, connect(cleanup.database(url, "engram-locomo-")) as conn:
        apply_migrations(conn)
        conn.autocommit = False
        tenant_id = ensure_tenant(conn, f"locomo-bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
        conn.commit()
        embedder.embed(["warm-up"])  # load the model outside the timed sections
        for conversation in conversations:
            ingested = ingest(conn, embedder, tenant_id, conversation, times, units=args.store == "units")
            print(f"{conversation.sample_id}: {len(conversation.turns)} turns", file=sys.stderr)
            evaluate(conn, embedder, conversation, ingested, stats, embed_ms)
    result = summary(stats, times, embed_ms)
    emit(outline("LoCoMo retrieval (search latency without the query embedding)", result), result, args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from ops.bench import locomo_e2e

    parser = bench_parser("ops.bench.locomo_retrieval", __doc__)
    parser.add_argument("path", nargs="?", help="LoCoMo-format JSON file (or --file)")
    parser.add_argument("--file", default=None, help="LoCoMo-format JSON file")
    parser.add_argument("--mode", choices=("retrieval", "e2e"), default="retrieval")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument(
        "--store", choices=("units", "episodes"), default="units", help="retrieval mode: turns as units or episodes"
    )
    parser.add_argument("--database-url", default=None, help="retrieval mode (default: ENGRAM_DATABASE_URL)")
    locomo_e2e.add_arguments(parser)
    args = parser.parse_args(argv)
    args.file = args.file or args.path
    if not args.file:
        parser.error("a LoCoMo-format JSON file is required (argument or --file)")
    if args.limit_conversations is not None and args.limit_conversations < 1:
        parser.error("--limit-conversations must be at least 1")

    def bench() -> int:
        conversations = read_conversations(args)  # a bad file: before starting anything
        configure_logging("WARNING")  # on stderr: stdout is the report
        return (locomo_e2e.run if args.mode == "e2e" else run)(args, conversations)

    return run_main(bench, error_code=2)


if __name__ == "__main__":
    sys.exit(main())
