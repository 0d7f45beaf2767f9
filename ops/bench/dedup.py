"""Consolidation's second-level dedup, measured: word-overlap Jaccard vs the embedder's cosine on duplicate and
non-duplicate pairs derived from LoCoMo at run time (never stored: CC BY-NC 4.0, evaluation only), with a guard
set of distinct facts for `false_merge`. docs/benchmarks.md has the labelling rule and its weaknesses.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from ops.bench.harness import BenchError, bench_parser, emit, outline, run_main
from ops.bench.locomo_data import DEV_FILE, read_locomo

JACCARD_THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.75)
COSINE_THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
MAX_FALSE_MERGE = 0.01
_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Pair:
    fact: str
    other: str
    duplicate: bool


def _dia_ids(value: Any) -> list[str]:
    """dia_ids in an evidence value (a string or a list; one string may pack several), leading zeros dropped."""
    texts = value if isinstance(value, list) else [value]
    return [f"D{int(s)}:{int(t)}" for text in texts for s, t in _DIA_ID.findall(str(text))]


def _turn_text(turn: dict[str, Any]) -> str:
    caption = turn.get("blip_caption")
    return f"{turn['text']} (shares a photo: {caption})" if caption else str(turn["text"])


def _session_number(name: str) -> int:
    return int(re.findall(r"\d+", name)[0])


def _single_turn(evidence: Any, turns: dict[str, dict[str, Any]], speaker: str) -> str | None:
    """The one turn of `speaker` an observation cites, or None (it cites several, none, or another's)."""
    cited = [d for d in _dia_ids(evidence) if d in turns]
    return cited[0] if len(cited) == 1 and turns[cited[0]]["speaker"] == speaker else None


def derive_pairs(conversations: list[dict[str, Any]]) -> tuple[list[Pair], list[Pair]]:
    """(labelled pairs, guard pairs) by the rules in the module docstring, deterministically."""
    pairs: list[Pair] = []
    guard: list[Pair] = []
    for conversation in conversations:
        dialogue = conversation["conversation"]
        turns: dict[str, dict[str, Any]] = {}
        by_speaker: dict[str, dict[int, list[str]]] = {}  # speaker → session → their dia_ids, in order
        for name in sorted((k for k in dialogue if re.fullmatch(r"session_\d+", k)), key=_session_number):
            session = _session_number(name)
            for turn in dialogue[name]:
                turns[turn["dia_id"]] = turn
                by_speaker.setdefault(turn["speaker"], {}).setdefault(session, []).append(turn["dia_id"])
        for name in sorted(conversation.get("observation", {}), key=_session_number):
            session = _session_number(name)
            for speaker, items in sorted(conversation["observation"][name].items()):
                sessions = sorted(by_speaker.get(speaker, {}))
                if session not in sessions or len(sessions) < 2:
                    continue
                for (fact, evidence), (following, its_evidence) in pairwise(items):
                    if set(_dia_ids(evidence)).isdisjoint(_dia_ids(its_evidence)):
                        guard.append(Pair(fact, following, False))
                single = [_single_turn(evidence, turns, speaker) for _, evidence in items]
                for index, (fact, _) in enumerate(items):
                    cited = single[index]
                    if cited is None:
                        continue
                    following = single[index + 1] if index + 1 < len(items) else None
                    if following is not None and following != cited:
                        pairs.append(Pair(fact, _turn_text(turns[following]), False))
                    own = by_speaker[speaker][session]
                    position = own.index(cited) if cited in own else 0
                    other_session = sessions[(sessions.index(session) + 1) % len(sessions)]
                    candidates = by_speaker[speaker][other_session]
                    other = turns[candidates[position % len(candidates)]]
                    pairs.append(Pair(fact, _turn_text(turns[cited]), True))
                    pairs.append(Pair(fact, _turn_text(other), False))
    return pairs, guard


def scores(
    pairs: Sequence[Pair], threshold: float, similarity: Sequence[float], guard: Sequence[float]
) -> dict[str, float]:
    outcomes = [(s >= threshold, p.duplicate) for p, s in zip(pairs, similarity, strict=True)]
    tp, fp, fn = (outcomes.count(outcome) for outcome in ((True, True), (True, False), (False, True)))
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    false_merge = sum(1 for s in guard if s >= threshold) / len(guard) if guard else 0.0
    return {
        "threshold": threshold,
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
        "false_merge": round(false_merge, 3),
    }


def _chosen(rows: list[dict[str, float]]) -> dict[str, float]:
    safe = [r for r in rows if r["false_merge"] <= MAX_FALSE_MERGE] or rows[-1:]
    return max(safe, key=lambda r: (r["f1"], r["threshold"]))  # a tie goes to the safer, higher threshold


def evaluate(pairs: Sequence[Pair], guard: Sequence[Pair], embed: Any) -> dict[str, Any]:
    from shared.maintenance.consolidation import jaccard

    everything = [*pairs, *guard]
    jaccards = [jaccard(p.fact, p.other) for p in everything]
    # Cosine as a dot product: `embed(texts)` returns unit vectors (the project's embedders do).
    texts = sorted({p.fact for p in everything} | {p.other for p in everything})
    vectors = dict(zip(texts, embed(texts), strict=True))
    cosines = [sum(a * b for a, b in zip(vectors[p.fact], vectors[p.other], strict=True)) for p in everything]
    n = len(pairs)
    jaccard_rows = [scores(pairs, t, jaccards[:n], jaccards[n:]) for t in JACCARD_THRESHOLDS]
    cosine_rows = [scores(pairs, t, cosines[:n], cosines[n:]) for t in COSINE_THRESHOLDS]
    best = {"jaccard": _chosen(jaccard_rows), "cosine": _chosen(cosine_rows)}
    winner = max(best, key=lambda name: best[name]["f1"])
    return {
        "pairs": n,
        "duplicates": sum(p.duplicate for p in pairs),
        "guard_pairs": len(guard),
        "max_false_merge": MAX_FALSE_MERGE,
        "jaccard": jaccard_rows,
        "cosine": cosine_rows,
        "jaccard_0_75": next(r for r in jaccard_rows if r["threshold"] == 0.75),
        "best_jaccard": best["jaccard"],
        "best_cosine": best["cosine"],
        "chosen": {"method": winner, **best[winner]},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.dedup", __doc__)
    parser.add_argument("--file", type=Path, default=DEV_FILE, help="LoCoMo JSON (a list of conversations)")
    args = parser.parse_args(argv)
    return run_main(lambda: bench(args.file, args.json))


def bench(path: Path, as_json: bool) -> int:
    pairs, guard = derive_pairs(read_locomo(path))
    if not pairs:
        raise BenchError(f"no labelled pairs could be derived from {path}")
    from shared.embeddings.providers import embedder_from_settings
    from shared.infra.config import get_settings

    embedder = embedder_from_settings(get_settings())
    result = evaluate(pairs, guard, embedder.embed)
    result["embedder"] = f"{embedder.provider}:{embedder.model}"
    emit(outline("dedup: Jaccard vs cosine", result), result, as_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
