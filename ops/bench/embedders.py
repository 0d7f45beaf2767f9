"""Local embedding backends compared, each in a child process with one compute thread: recall@10 of a
direct embed-and-rank (the model alone, no engram search), texts/s, context windows timed one call each, RSS.

    python -m ops.bench.embedders --file ../shared/bench/locomo-dev.json [--backends torch,onnx,onnx-int8] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ops.bench.harness import BenchError, bench_parser, emit, outline, ratio, run_main
from ops.bench.locomo_data import Conversation, load_conversations
from ops.bench.locomo_retrieval import neighbour_context, read_conversations, recall_at

BACKENDS = ("torch", "onnx", "onnx-int8")


def context_windows(conversations: Sequence[Conversation], count: int) -> list[str]:
    """The first `count` model inputs ingest makes of the turns: each turn stored as an episode, its neighbours as
    `metadata.context`, made into model input by the product's own `embedding_inputs`."""
    from shared.memory.indexing import embedding_inputs
    from shared.memory.memory_input import CONTEXT_KEY, DEFAULT_NAMESPACE

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


def child(
    backend: str, file: Path, onnx_path: Path, batch_size: int, limit: int | None, window_count: int
) -> dict[str, Any]:
    """Runs in the backend's own process; returns its figures."""
    conversations: list[Conversation] = load_conversations(file)[:limit]
    from shared.embeddings.providers import embedder_from_settings
    from shared.infra.config import Settings

    # The product's own construction of the backend: the local model, whatever the environment configures.
    settings = Settings(
        embedding_provider="local",
        embedding_model=None,
        embedding_dimensions=None,
        embedding_backend=backend,
        embedding_onnx_path=onnx_path,
        embedding_batch_size=batch_size,
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
    windows = context_windows(conversations, window_count)
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
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.embedders", __doc__)
    parser.add_argument("--file", required=True, help="LoCoMo-format JSON")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument(
        "--windows", type=int, default=1000, help="context windows to time one call each (0: none; default 1000)"
    )
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--onnx-path", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        raise BenchError("--batch-size must be at least 1")
    if args.windows < 0:
        raise BenchError("--windows must be 0 or more")
    if args.child:
        figures = child(
            args.child, Path(args.file), Path(args.onnx_path), args.batch_size, args.limit_conversations, args.windows
        )
        print(json.dumps(figures))
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
