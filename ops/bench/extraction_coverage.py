"""The offline rules extractor against LoCoMo's per-session `observation` facts: an observation is covered when a
fact extracted from one of its evidence turns shares a content word with it. docs/benchmarks.md has the details."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ops.bench.harness import bench_parser, emit, outline, run_main
from ops.bench.locomo_data import normalise_dia_id, parse_conversations, read_locomo
from shared.pipeline.extraction import TranscriptMessage
from shared.pipeline.offline_extraction import offline_extract
from shared.text import words

_STOPWORDS = frozenset(
    re.findall(
        r"\S+",
        """the and for with that this from have has had was were are you your user about they them their there then
        than been being into over also just very really some what when where which who will would can could should
        her his she him its our out not but all any one two new get got like likes loved love enjoys feel feels
        felt time recently currently still after before during while because since about more most much many""",
    )
)
_SESSION_OBSERVATION = re.compile(r"session_(\d+)_observation")


def content_words(text: str, names: frozenset[str]) -> frozenset[str]:
    return frozenset(w for w in words(text) if len(w) >= 3 and w not in _STOPWORDS and w not in names)


def measure(data: list[dict[str, Any]]) -> dict[str, Any]:
    observations = covered = facts_total = turns_total = 0
    for sample, conversation in zip(data, parse_conversations(data), strict=True):
        body = sample.get("conversation") or {}
        names = frozenset(w for key in ("speaker_a", "speaker_b") for w in words(str(body.get(key, ""))) if len(w) >= 2)
        extracted: dict[str, list[str]] = {}  # dia_id → the facts its turn gave
        for turn in conversation.turns:
            message = TranscriptMessage(0, "user", turn.said.strip(), turn.speaker)
            values = [f"{key} {value}" for _, key, value in offline_extract([message], name_speakers=True).items()]
            facts_total += len(values)
            extracted[turn.dia_id] = values
        turns_total += len(conversation.turns)
        for key, by_speaker in (sample.get("observation") or {}).items():
            if not _SESSION_OBSERVATION.fullmatch(key) or not isinstance(by_speaker, dict):
                continue
            for entries in by_speaker.values():
                for entry in entries:
                    if not isinstance(entry, list) or len(entry) < 2:
                        continue
                    text, evidence = str(entry[0]), entry[1]
                    sources = [
                        normalise_dia_id(str(e)) for e in (evidence if isinstance(evidence, list) else [evidence])
                    ]
                    wanted = content_words(text, names)
                    observations += 1
                    found = [fact for source in sources if source for fact in extracted.get(source, [])]
                    if any(wanted & content_words(fact, names) for fact in found):
                        covered += 1
    return {
        "observations": observations,
        "covered": covered,
        "coverage": round(covered / observations, 4) if observations else None,
        "turns": turns_total,
        "facts": facts_total,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("ops.bench.extraction_coverage", __doc__)
    parser.add_argument("file", help="LoCoMo-format JSON file")
    args = parser.parse_args(argv)

    def bench() -> int:
        result = measure(read_locomo(Path(args.file)))
        emit(outline("offline rules extraction vs LoCoMo observations", result), result, args.json)
        return 0

    return run_main(bench)


if __name__ == "__main__":
    sys.exit(main())
