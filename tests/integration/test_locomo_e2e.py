"""The LoCoMo benchmark's end-to-end mode as a user runs it (`python -m ops.bench.locomo_retrieval --mode e2e`):
its own stack, a LoCoMo-format file ingested through the messages API, the memory pipeline waited on,
questions asked of the context endpoint. On a tiny file this test writes itself, whose sessions each keep
to one topic, so the questions' evidence turns are plainly there to be found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

BUDGETS = (500, 1000, 2000)


def turn(speaker: str, dia_id: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


# Two sessions of five turns, each turn a message with its transcript unit.
TINY_LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                turn(
                    "Ben",
                    "D1:1",
                    "I am training for the Berlin marathon in September, my very first marathon, and the training "
                    "plan has me running five days a week with a long run every Sunday morning before breakfast.",
                ),
                turn(
                    "Ana",
                    "D1:2",
                    "The Berlin marathon! That is a famously flat and fast course. How is the marathon training "
                    "going so far, and are your legs holding up with all those long Sunday runs?",
                ),
                turn(
                    "Ben",
                    "D1:3",
                    "The marathon training is tough but good: long runs on Sundays, short easy runs during the "
                    "week, and a lot of stretching so I reach the Berlin start line in September without injuries.",
                ),
                turn(
                    "Ana",
                    "D1:4",
                    "I will travel to Berlin in September to cheer for you at the marathon, right at the finish "
                    "line near the Brandenburg Gate, with a big sign and a bag of snacks for after the race.",
                ),
                turn(
                    "Ben",
                    "D1:5",
                    "That would mean a lot to me, thank you! I will look for your sign at the finish line, and after "
                    "the race we can celebrate with a huge plate of pasta somewhere near the Brandenburg Gate.",
                ),
            ],
            "session_2_date_time": "10:00 am on 20 May, 2023",
            "session_2": [
                turn(
                    "Ana",
                    "D2:1",
                    "I started pottery classes on Tuesday evenings at a small studio in Alfama, and in my first "
                    "pottery class I threw a bowl on the wheel that came out lopsided, but I love it anyway.",
                ),
                turn(
                    "Ben",
                    "D2:2",
                    "Pottery classes on Tuesdays sound like a lovely way to unwind. A lopsided first bowl has "
                    "character; my sister kept the very first pot she made in her pottery class for years.",
                ),
                turn(
                    "Ana",
                    "D2:3",
                    "Next Tuesday the pottery class glazes the bowls we threw on the wheel, and I want a deep blue "
                    "glaze like the tiles on my street; the teacher says blue glazes run in the kiln.",
                ),
                turn(
                    "Ben",
                    "D2:4",
                    "Send me a photo of the bowl after the pottery class fires it in the kiln, and tell me whether "
                    "the blue glaze stayed where you put it or ran down the sides of the bowl.",
                ),
                turn(
                    "Ana",
                    "D2:5",
                    "I will send the photo, whatever the kiln does to it! If the glaze runs, I will call the bowl "
                    "modern art and keep it on my desk next to the other pottery I made at the studio.",
                ),
            ],
        },
        "qa": [
            {
                "question": "Which marathon is Ben training for?",
                "answer": "Berlin",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What classes did Ana start on Tuesdays?",
                "answer": "pottery",
                "evidence": ["D2:01"],
                "category": 4,
            },
            {"question": "What is Ana's favourite film?", "adversarial_answer": "Up", "evidence": [], "category": 5},
        ],
    }
]


def run_e2e(path: Path) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "ops.bench.locomo_retrieval",
        "--mode",
        "e2e",
        "--file",
        str(path),
        "--budgets",
        ",".join(map(str, BUDGETS)),
        "--env",
        "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS=0.5",
        "--wait-timeout",
        "180",
        "--json",
    ]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_e2e_mode_finds_ingested_evidence_in_the_context_within_budget(tmp_path: Path) -> None:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(TINY_LOCOMO), encoding="utf-8")

    result = run_e2e(path)

    assert result["mode"] == "e2e"
    assert (result["conversations"], result["sessions"], result["messages"]) == (1, 2, 10)
    assert result["questions"] == 2 and result["evidence_turns"] == 2  # the adversarial question is left out
    assert set(result["budgets"]) == {str(b) for b in BUDGETS}
    for budget in BUDGETS:
        figures = result["budgets"][str(budget)]
        # The evidence turns were ingested and each session is about one thing: the context carries them.
        assert figures["evidence_recall"] > 0, figures
        assert 0 < figures["tokens_mean"] <= figures["tokens_max"] <= budget, figures
        assert figures["over_budget"] == 0 and figures["recount_mismatch"] == 0, figures
        assert figures["recounted"] == 2, figures
        assert 0 < figures["latency_ms_p50"] <= figures["latency_ms_p95"], figures
        assert set(figures["by_category"]) == {"single-hop"}, figures
