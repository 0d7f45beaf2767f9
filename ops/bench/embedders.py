"""Embedding choices on LoCoMo turns: the local backends, each in a one-thread child process, or with
--context-vectors the recipes for embedding a memory with its context. docs/benchmarks.md defines the figures."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

# The backends' children import it all as well, through locomo_retrieval: their RSS is not changed by it.
from ops.bench import locomo_retrieval as locomo
from ops.bench.harness import BenchError, BenchRun, bench_parser, emit, outline, ratio, run_main
from ops.bench.locomo_data import Conversation, load_conversations
from ops.bench.locomo_retrieval import neighbour_context, read_conversations, recall_at
from shared.access.auth import ensure_tenant
from shared.embeddings import Embedder, ensure_embedding_space
from shared.embeddings.cache import register_vector_types
from shared.embeddings.providers import embedder_from_settings
from shared.infra.config import Settings, get_settings
from shared.infra.db import Conn, connect
from shared.infra.logging import configure_logging
from shared.infra.migrate import apply_migrations
from shared.memory.indexing import _write_chunks, embedding_inputs
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import CONTEXT_KEY, DEFAULT_NAMESPACE, MemoryInput
from shared.memory.store import Scope, store_memory
from shared.turns.accept import ensure_user

BACKENDS = ("torch", "onnx", "onnx-int8")
LEGS = ("vector", "hybrid")


def context_windows(conversations: Sequence[Conversation], count: int) -> list[str]:
    """The first `count` model inputs ingest makes of the turns: each turn stored as an episode, its neighbours as
    `metadata.context`, made into model input by the product's own `embedding_inputs`."""

    def every_window() -> Iterator[str]:
        for conv in conversations:
            for index, turn in enumerate(conv.turns):
                memory = {
                    "namespace": DEFAULT_NAMESPACE.get("episode"),
                    "key": turn.dia_id,
                    "value": turn.text,
                    "kind": "episode",
                    "metadata": {CONTEXT_KEY: neighbour_context(conv.turns, index)},
                }
                yield from (text for _chunk, text in embedding_inputs(memory))

    return list(itertools.islice(every_window(), count))


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in the backend's own process (--child BACKEND); returns its figures."""
    conversations: list[Conversation] = load_conversations(Path(args.file))[: args.limit_conversations]
    # The product's own construction of the backend: the local model, whatever the environment configures.
    settings = Settings(
        embedding_provider="local",
        embedding_model=None,
        embedding_dimensions=None,
        embedding_backend=args.child,
        embedding_onnx_path=Path(args.onnx_path),
        embedding_batch_size=args.batch_size,
    )
    embedder = embedder_from_settings(settings)
    started = time.perf_counter()
    embedder.embed(["warm-up"])  # loads (and for onnx, exports if missing) the model
    load_s = time.perf_counter() - started
    texts = [turn.text for c in conversations for turn in c.turns]
    started = time.perf_counter()
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    embed_s = time.perf_counter() - started
    questions = [q for c in conversations for q in c.questions]
    qv = np.asarray(embedder.embed([q.text for q in questions]), dtype=np.float32)
    recalls: list[float] = []
    offset, qi = 0, 0
    for conv in conversations:
        block = vectors[offset : offset + len(conv.turns)]
        offset += len(conv.turns)
        for question in conv.questions:
            order = np.argsort(-(block @ qv[qi]))
            qi += 1
            ranked = [frozenset({conv.turns[i].dia_id}) for i in order[:10]]
            recalls.append(recall_at(ranked, set(question.evidence), 10))
    windows = context_windows(conversations, args.windows)
    started = time.perf_counter()
    for window in windows:  # one call each: what embedding one pending memory (or one query) costs
        embedder.embed([window])
    window_s = time.perf_counter() - started
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's peak.
    status = Path("/proc/self/status").read_text().splitlines()
    rss_mb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    return {
        "texts": len(texts),
        "questions": len(questions),
        "recall_at_10": round(float(np.mean(recalls)), 4) if recalls else None,
        "texts_per_s": round(len(texts) / embed_s, 1),
        "windows": len(windows),
        "window_ms": round(window_s * 1000 / len(windows), 2) if windows else None,
        "load_s": round(load_s, 2),
        "peak_rss_mb": round(rss_mb, 1),
        "sample": vectors[:200].tolist(),
    }


def run(args: argparse.Namespace) -> int:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if (unknown := sorted(set(backends) - set(BACKENDS))) or not backends:
        raise BenchError(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}")
    read_conversations(args)  # a readable LoCoMo file, or a BenchError that says why
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="engram-embedders-") as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        if "onnx" in backends or "onnx-int8" in backends:
            from shared.embeddings.providers import export_local_onnx, int8_path, quantize_local_onnx

            export_local_onnx(onnx_path)  # once, not in any backend's load time
            if "onnx-int8" in backends:
                quantize_local_onnx(onnx_path, int8_path(onnx_path))
        for backend in backends:
            options = {"child": backend, "file": args.file, "onnx-path": onnx_path, "batch-size": args.batch_size}
            options.update({"windows": args.windows, "limit-conversations": args.limit_conversations})
            command = [sys.executable, "-m", "ops.bench.embedders"]
            command += [f"--{name}={value}" for name, value in options.items() if value is not None]
            done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), check=False)
            if done.returncode != 0:
                raise BenchError(f"{backend} failed: {done.stderr.strip()[-500:]}")
            results[backend] = json.loads(done.stdout.strip().splitlines()[-1])
    summary: dict[str, Any] = {}

    def cosines(a: str, b: str) -> np.ndarray:
        return np.sum(np.asarray(results[a]["sample"]) * np.asarray(results[b]["sample"]), axis=1)

    if "torch" in results and "onnx" in results:
        summary["onnx_vs_torch_min_cosine"] = round(float(np.min(cosines("torch", "onnx"))), 6)
        summary["onnx_vs_torch_speedup"] = ratio(results["onnx"]["texts_per_s"], results["torch"]["texts_per_s"])
    if "onnx" in results and "onnx-int8" in results:
        # int8 is another embedding space: how far its vectors are from fp32's, and what it buys.
        summary["int8_vs_onnx_min_cosine"] = round(float(np.min(cosines("onnx", "onnx-int8"))), 6)
        summary["int8_vs_onnx_speedup"] = ratio(results["onnx-int8"]["texts_per_s"], results["onnx"]["texts_per_s"])
        summary["int8_vs_onnx_window_speedup"] = ratio(results["onnx"]["window_ms"], results["onnx-int8"]["window_ms"])
    for figures in results.values():
        figures.pop("sample")
    summary["backends"] = results
    summary["load_avg_1m"] = round(os.getloadavg()[0], 2)
    emit(outline("embedding backends", summary), summary, args.json)
    return 0


def _store(
    conn: Conn, tenant_id: int, conversation: locomo.Conversation
) -> tuple[locomo.Ingested, list[dict[str, Any]], dict[int, list[str]]]:
    """The turns stored as episodes with their context; the rows, and each memory's neighbouring turns."""
    ingested = locomo.Ingested(Scope(tenant_id, ensure_user(conn, tenant_id, conversation.sample_id)), {})
    neighbours: dict[int, list[str]] = {}
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
            memory_id = int(store_memory(conn, ingested.scope, item, "context-vectors-bench").memory["id"])
        except MemoryRejected:
            continue
        ingested.dia_ids.setdefault(memory_id, set()).add(turn.dia_id)
        neighbours.setdefault(memory_id, locomo.neighbours(turns, index))
    rows = conn.execute(
        """SELECT id, tenant_id, user_id, namespace, key, value, kind, metadata, updated_at FROM memories
           WHERE id = ANY(%s) ORDER BY id""",
        (sorted(ingested.dia_ids),),
    ).fetchall()
    conn.commit()
    return ingested, rows, neighbours


def _timed(embedder: Embedder, texts: list[str], costs: dict[str, float], name: str) -> dict[str, list[float]]:
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    costs[f"{name}_seconds"] += time.perf_counter() - started
    costs[f"{name}_texts"] += len(texts)
    costs[f"{name}_chars"] += sum(map(len, texts))
    return dict(zip(texts, vectors, strict=True))


def _combined(own: list[float], context: list[list[float]], alpha: float) -> list[float]:
    vector = alpha * np.asarray(own) + (1 - alpha) * np.mean(np.asarray(context), axis=0)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def context_vectors(args: argparse.Namespace) -> int:
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
            ingested, rows, neighbours = _store(conn, tenant_id, conversation)
            inputs = {row["id"]: embedding_inputs(row) for row in rows}
            concat = [text for row in rows for _, text in inputs[row["id"]]]
            pieces = list(
                dict.fromkeys(
                    [chunk.text for row in rows for chunk, _ in inputs[row["id"]]]
                    + [turn for row in rows for turn in neighbours[row["id"]]]
                )
            )
            contexts = list(dict.fromkeys(c for row in rows if (c := (row["metadata"] or {}).get(CONTEXT_KEY))))
            concat_vectors = _timed(embedder, concat, costs, "concat")
            piece_vectors = _timed(embedder, pieces, costs, "lines")
            whole_vectors = dict(zip(contexts, embedder.embed(contexts), strict=True))
            for recipe in recipes:
                items = []
                for row in rows:
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
                                [piece_vectors[t] for t in neighbours[row["id"]]]
                                if recipe.startswith("lines")
                                else [whole_vectors[context]]
                            )
                            vectors.append(_combined(piece_vectors[chunk.text], around, alpha))
                    items.append((row, inputs[row["id"]], vectors))
                _write_chunks(conn, embedder, items)
                conn.commit()
                stats = {mode: locomo.ModeStats() for mode in locomo.MODES}
                locomo.evaluate(conn, embedder, conversation, ingested, stats, [])
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
                diffs = [x - y for x, y in zip(values, base, strict=True)]
                entry["better_worse_same"] = [sum(d > 0 for d in diffs), sum(d < 0 for d in diffs), diffs.count(0)]
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
    parser = bench_parser("ops.bench.embedders", __doc__)
    parser.add_argument("--file", required=True, help="LoCoMo-format JSON")
    parser.add_argument("--context-vectors", action="store_true", help="compare context recipes, not backends")
    parser.add_argument("--alphas", type=_alphas, default=[0.5, 0.6, 0.7], help="recipes' weights of the chunk's own")
    parser.add_argument("--database-url", default=None, help="recipes: ENGRAM_DATABASE_URL, else embedded Postgres")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument(
        "--windows", type=int, default=1000, help="context windows to time one call each (0: none; default 1000)"
    )
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--onnx-path", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.windows < 0:
        raise BenchError("--windows must be 0 or more and --batch-size at least 1")
    if args.context_vectors:
        configure_logging("WARNING")
        return context_vectors(args)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
