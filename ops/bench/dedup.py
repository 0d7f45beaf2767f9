"""Consolidation's second-level dedup, measured: word-overlap Jaccard vs cosine similarity of the project's
embedder (shared/embeddings; MiniLM locally) on duplicate / non-duplicate pairs derived from LoCoMo.

    python -m ops.bench.dedup                          # reads /work/shared/bench/locomo-dev.json
    python -m ops.bench.dedup --file locomo.json --json

The data is read at run time and never stored (LoCoMo is CC BY-NC 4.0, evaluation only).

Labelling rule (deterministic). LoCoMo's `observation` lists, per session and speaker, facts a person
wrote about what the speaker said, each citing the dialogue turn (dia_id) it came from.
- duplicate: an observation citing exactly one turn, paired with that turn ("<text>", plus the
  image caption when the turn shared a photo). Both say the same thing in other words.
- not a duplicate: the same observation paired with a turn of the same speaker from another session:
  the next session (cyclically) in which the speaker talks, the turn at the same position among the
  speaker's turns there (modulo their count). Same person, same conversation, another day.
- not a duplicate (hard): the same observation paired with the turn cited by the next observation of
  the same speaker in the same session (when that one cites another single turn): same person, same
  day, often the same topic, but another fact, which consolidation must keep.
Every pair is thus a written fact against a chat turn: the labels differ in which turn, not in register.

Guard set (all non-duplicates, in the register consolidation really compares: fact against fact): two
observations of the same speaker in the same session citing different turns (each with the next one).
Its column `false_merge` is the share of those distinct facts a threshold would call duplicates, i.e.
the facts consolidation would silently drop. A dedup that drops real facts is worse than one that keeps
a duplicate, so the threshold is chosen as the best F1 among those whose false_merge is at most 1 %.
(Consolidation's default does not follow it blindly: the set has no short facts; see
shared/maintenance/consolidation.py `duplicate_of` for the figures and the decision.)

Weaknesses, honestly: (1) the duplicate pairs mix registers (a third-person written fact against a
first-person chat line), while consolidation compares two extracted facts; word overlap suffers from
that more than embeddings do, so Jaccard's absolute recall here is lower than it would be between two
extracted facts. (2) A "different session" turn is occasionally about the same thing (people return to
topics), so a few negatives are really duplicates, which costs both methods precision alike. (3) A turn
often says more than the observation (small talk around the fact), which lowers every similarity of a
true pair. The figures rank the methods and place a threshold; they are not absolute error rates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from ops.bench.harness import bench_parser, emit

DEFAULT_FILE = Path("/work/shared/bench/locomo-dev.json")
JACCARD_THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.75)
COSINE_THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclass(frozen=True)
class Pair:
    fact: str
    other: str
    duplicate: bool


def _dia_ids(value: Any) -> list[str]:
    """dia_ids in an evidence value (a string, or a list; several may be packed into one string), leading
    zeros dropped."""
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
    """(labelled pairs, guard pairs), by the rules in the module docstring (same input → same pairs, same
    order)."""
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
    tp = sum(1 for p, s in zip(pairs, similarity, strict=True) if s >= threshold and p.duplicate)
    fp = sum(1 for p, s in zip(pairs, similarity, strict=True) if s >= threshold and not p.duplicate)
    fn = sum(1 for p, s in zip(pairs, similarity, strict=True) if s < threshold and p.duplicate)
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


def cosine_similarities(pairs: Sequence[Pair], embed: Any) -> list[float]:
    """Cosine of each pair's two texts; `embed(texts)` returns unit vectors (the project's embedders do)."""
    texts = sorted({p.fact for p in pairs} | {p.other for p in pairs})
    vectors = dict(zip(texts, embed(texts), strict=True))
    return [sum(a * b for a, b in zip(vectors[p.fact], vectors[p.other], strict=True)) for p in pairs]


MAX_FALSE_MERGE = 0.01


def _chosen(rows: list[dict[str, float]]) -> dict[str, float]:
    safe = [r for r in rows if r["false_merge"] <= MAX_FALSE_MERGE] or rows[-1:]
    return max(safe, key=lambda r: (r["f1"], r["threshold"]))  # a tie goes to the safer, higher threshold


def evaluate(pairs: Sequence[Pair], guard: Sequence[Pair], embed: Any) -> dict[str, Any]:
    from shared.maintenance.consolidation import jaccard

    everything = [*pairs, *guard]
    jaccards = [jaccard(p.fact, p.other) for p in everything]
    cosines = cosine_similarities(everything, embed)
    n = len(pairs)
    jaccard_rows = [scores(pairs, t, jaccards[:n], jaccards[n:]) for t in JACCARD_THRESHOLDS]
    cosine_rows = [scores(pairs, t, cosines[:n], cosines[n:]) for t in COSINE_THRESHOLDS]
    best = {"jaccard": _chosen(jaccard_rows), "cosine": _chosen(cosine_rows)}
    winner = max(best, key=lambda name: best[name]["f1"])
    return {
        "bench": "dedup",
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


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{result['pairs']} labelled pairs ({result['duplicates']} duplicates), {result['guard_pairs']} guard pairs"
        " (distinct facts)",
        f"{'method':<8} {'threshold':>9} {'precision':>9} {'recall':>7} {'F1':>6} {'false_merge':>11}",
    ]
    for method in ("jaccard", "cosine"):
        for row in result[method]:
            lines.append(
                f"{method:<8} {row['threshold']:>9.2f} {row['precision']:>9.3f} {row['recall']:>7.3f} "
                f"{row['f1']:>6.3f} {row['false_merge']:>11.3f}"
            )
    for name in ("jaccard_0_75", "best_jaccard", "best_cosine", "chosen"):
        row = result[name]
        lines.append(
            f"{name:<13} {row.get('method', ''):<8} t={row['threshold']:.2f}  P={row['precision']:.3f} "
            f"R={row['recall']:.3f} F1={row['f1']:.3f} false_merge={row['false_merge']:.3f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = bench_parser("ops.bench.dedup", __doc__)
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LoCoMo JSON (a list of conversations)")
    args = parser.parse_args(argv)
    try:
        conversations = json.loads(args.file.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read {args.file}: {exc}") from exc
    pairs, guard = derive_pairs(conversations)
    if not pairs:
        raise SystemExit(f"no labelled pairs could be derived from {args.file}")
    from shared.embeddings.providers import embedder_from_settings
    from shared.infra.config import get_settings

    embedder = embedder_from_settings(get_settings())
    result = evaluate(pairs, guard, embedder.embed)
    result["embedder"] = f"{embedder.provider}:{embedder.model}"
    emit(render(result), result, args.json)


if __name__ == "__main__":
    main()
