"""Embedding a memory with its context: the product's concatenated window (concat) against normalised mixes
a·v(chunk) + (1−a)·mean(v(each neighbouring turn)) (lines) and a·v(chunk) + (1−a)·v(stored context) (whole),
written for the same stored LoCoMo turns; recall@10 per question against concat's, and the model time.

    python -m ops.bench.context_vectors path/to/locomo.json [--alphas 0.5,0.6,0.7] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ops.bench import locomo_retrieval as locomo
from ops.bench.harness import BenchRun, bench_parser, emit, outline, run_main
from shared.access.auth import ensure_tenant
from shared.embeddings import Embedder, ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import get_settings
from shared.infra.db import Conn, connect
from shared.infra.logging import configure_logging
from shared.infra.migrate import apply_migrations
from shared.memory.indexing import _write_chunks, embedding_inputs
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import CONTEXT_KEY, MemoryInput
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user

LEGS = ("vector", "hybrid")


@dataclass
class Stored:
    ingested: locomo.Ingested
    rows: list[dict[str, Any]]
    neighbours: dict[int, list[str]] = field(default_factory=dict)  # memory id → its window's turns


def _store(conn: Conn, tenant_id: int, conversation: locomo.Conversation) -> Stored:
    scope = Scope(tenant_id, ensure_user(conn, tenant_id, conversation.sample_id))
    stored = Stored(locomo.Ingested(scope, {}), [])
    turns = conversation.turns
    for index, turn in enumerate(turns):
        item = MemoryInput(
            key=turn.dia_id,
            value=turn.text,
            kind="episode",
            event_time=turn.event_time,
            metadata={"dia_id": turn.dia_id, CONTEXT_KEY: locomo.neighbour_context(turns, index)},
        )
        try:
            memory_id = int(store_memory(conn, scope, item, "context-vectors-bench").memory["id"])
        except MemoryRejected:
            continue
        stored.ingested.dia_ids.setdefault(memory_id, set()).add(turn.dia_id)
        window = range(index - locomo.CONTEXT_BEFORE, index + locomo.CONTEXT_AFTER + 1)
        stored.neighbours.setdefault(
            memory_id,
            [turns[i].text for i in window if i != index and 0 <= i < len(turns) and turns[i].session == turn.session],
        )
    stored.rows = conn.execute(
        """SELECT id, tenant_id, user_id, namespace, key, value, kind, metadata, updated_at FROM memories
           WHERE id = ANY(%s) ORDER BY id""",
        (sorted(stored.ingested.dia_ids),),
    ).fetchall()
    conn.commit()
    return stored


def _timed(embedder: Embedder, texts: list[str], costs: dict[str, float], name: str) -> dict[str, list[float]]:
    """The texts' vectors, their count, characters and model time added to `costs`."""
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    costs[f"{name}_seconds"] += time.perf_counter() - started
    costs[f"{name}_texts"] += len(texts)
    costs[f"{name}_chars"] += sum(map(len, texts))
    return dict(zip(texts, vectors, strict=True))


def _combined(own: list[float], context: list[list[float]], alpha: float) -> list[float]:
    vector = alpha * np.asarray(own) + (1 - alpha) * np.mean(np.asarray(context), axis=0)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def run(args: argparse.Namespace) -> int:
    conversations = locomo.read_conversations(args)
    embedder = embedder_from_settings(get_settings())
    recipes = ["concat", *(f"{kind} a={a:g}" for kind in ("lines", "whole") for a in args.alphas)]
    per_question: dict[str, dict[str, list[float]]] = {r: {leg: [] for leg in LEGS} for r in recipes}
    costs = {f"{name}_{figure}": 0.0 for name in ("concat", "lines") for figure in ("texts", "chars", "seconds")}
    with (
        BenchRun() as cleanup,
        connect(cleanup.database(args.database_url or get_settings().database_url, "engram-ctxvec-")) as conn,
    ):
        apply_migrations(conn)
        conn.autocommit = False
        tenant_id = ensure_tenant(conn, f"context-vectors-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
        ensure_embedding_space(conn, embedder)
        conn.commit()
        register_vector_types(conn)
        embedder.embed(["warm-up"])
        for conversation in conversations:
            stored = _store(conn, tenant_id, conversation)
            inputs = {row["id"]: embedding_inputs(row) for row in stored.rows}
            concat = [text for row in stored.rows for _, text in inputs[row["id"]]]
            pieces = list(
                dict.fromkeys(
                    [chunk.text for row in stored.rows for chunk, _ in inputs[row["id"]]]
                    + [turn for row in stored.rows for turn in stored.neighbours[row["id"]]]
                )
            )
            contexts = list(dict.fromkeys(c for row in stored.rows if (c := (row["metadata"] or {}).get(CONTEXT_KEY))))
            concat_vectors = _timed(embedder, concat, costs, "concat")
            piece_vectors = _timed(embedder, pieces, costs, "lines")
            context_vectors = dict(zip(contexts, embedder.embed(contexts), strict=True))
            for recipe in recipes:
                items = []
                for row in stored.rows:
                    vectors = []
                    for chunk, text in inputs[row["id"]]:
                        context = (row["metadata"] or {}).get(CONTEXT_KEY)
                        if recipe == "concat":
                            vectors.append(concat_vectors[text])
                        elif not context:
                            vectors.append(piece_vectors[chunk.text])
                        else:
                            alpha = float(recipe.split("=")[1])
                            around = (
                                [piece_vectors[t] for t in stored.neighbours[row["id"]]]
                                if recipe.startswith("lines")
                                else [context_vectors[context]]
                            )
                            vectors.append(_combined(piece_vectors[chunk.text], around, alpha))
                    items.append((row, inputs[row["id"]], vectors))
                _write_chunks(conn, embedder, items)
                conn.commit()
                stats = {mode: locomo.ModeStats() for mode in locomo.MODES}
                locomo.evaluate(conn, embedder, conversation, stored.ingested, stats, [])
                for leg in LEGS:
                    per_question[recipe][leg].extend(stats[leg].scores.get("recall@10|all", []))
            print(f"{conversation.sample_id}: {len(conversation.turns)} turns", file=sys.stderr, flush=True)
    summary = _summary(recipes, per_question, costs)
    emit(outline("context vectors: recall@10 (better/worse/same vs concat per question)", summary), summary, args.json)
    return 0


def _summary(
    recipes: list[str], per_question: dict[str, dict[str, list[float]]], costs: dict[str, float]
) -> dict[str, Any]:
    recall: dict[str, dict[str, Any]] = {}
    for recipe in recipes:
        recall[recipe] = {}
        for leg in LEGS:
            values, base = per_question[recipe][leg], per_question["concat"][leg]
            entry: dict[str, Any] = {"recall_at_10": round(sum(values) / len(values), 4) if values else None}
            if recipe != "concat":
                entry["better_worse_same"] = [
                    sum(x > y for x, y in zip(values, base, strict=True)),
                    sum(x < y for x, y in zip(values, base, strict=True)),
                    sum(x == y for x, y in zip(values, base, strict=True)),
                ]
            recall[recipe][leg] = entry
    return {
        "questions": len(per_question["concat"]["hybrid"]),
        "recall": recall,
        "costs": {k: round(v, 2) if k.endswith("seconds") else int(v) for k, v in costs.items()},
    }


def _alphas(raw: str) -> list[float]:
    values = [float(part) for part in raw.split(",") if part.strip()]  # a ValueError is a usage error
    if not values or any(not 0 <= a <= 1 for a in values):
        raise argparse.ArgumentTypeError("weights are numbers between 0 and 1")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.context_vectors", __doc__)
    parser.add_argument("file", help="LoCoMo-format JSON file")
    parser.add_argument("--alphas", type=_alphas, default=[0.5, 0.6, 0.7], help="weights of the chunk's own vector")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument("--database-url", default=None, help="default ENGRAM_DATABASE_URL, else embedded Postgres")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
