"""ops/bench/dedup.py on a tiny LoCoMo-shaped file it writes: the labelling rule, the scores and --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ops.bench import dedup


def tiny_conversation() -> dict[str, Any]:
    def turn(dia_id: str, speaker: str, text: str) -> dict[str, str]:
        return {"dia_id": dia_id, "speaker": speaker, "text": text}

    return {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": [
                turn("D1:1", "Ann", "I adopted a puppy called Rex last week"),
                turn("D1:2", "Bob", "Nice!"),
                turn("D1:3", "Ann", "I also started pottery classes on Mondays"),
            ],
            "session_2": [
                turn("D2:1", "Ann", "My sister visits from Lisbon next month"),
                turn("D2:2", "Ann", "Work has been busy lately"),
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ann": [
                    ["Ann adopted a puppy called Rex", "D1:1"],
                    ["Ann started pottery classes on Mondays", "D01:03"],  # leading zeros are normalised
                    ["Ann is busy", "D1:1; D1:3"],  # cites two turns: no pair
                ]
            }
        },
    }


def test_pairs_follow_the_documented_rule() -> None:
    pairs, guard = dedup.derive_pairs([tiny_conversation()])
    assert pairs == [
        # the observation with its own turn; with the next observation's turn (hard); with another session's turn
        dedup.Pair("Ann adopted a puppy called Rex", "I also started pottery classes on Mondays", False),
        dedup.Pair("Ann adopted a puppy called Rex", "I adopted a puppy called Rex last week", True),
        dedup.Pair("Ann adopted a puppy called Rex", "My sister visits from Lisbon next month", False),
        dedup.Pair("Ann started pottery classes on Mondays", "I also started pottery classes on Mondays", True),
        dedup.Pair("Ann started pottery classes on Mondays", "Work has been busy lately", False),
    ]
    # Distinct facts of one person and day (the guard set), in the fact register; the last two cite a
    # turn in common, so they are not known to be distinct.
    assert guard == [dedup.Pair("Ann adopted a puppy called Rex", "Ann started pottery classes on Mondays", False)]


def fake_embed(texts: list[str]) -> list[list[float]]:
    """Unit vectors on two axes: puppy texts on one, everything else on the other."""
    return [[1.0, 0.0] if "puppy" in text else [0.0, 1.0] for text in texts]


def test_scores_and_the_json_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    pairs, guard = dedup.derive_pairs([tiny_conversation()])
    result = dedup.evaluate(pairs, guard, fake_embed)
    # Jaccard 0.75 finds neither paraphrase (puppy: 5 of 9 words shared, pottery: 5 of 8); 0.5 finds both.
    assert result["jaccard_0_75"] == {"threshold": 0.75, "precision": 1.0, "recall": 0.0, "f1": 0.0, "false_merge": 0.0}
    at_05 = next(r for r in result["jaccard"] if r["threshold"] == 0.5)
    assert (at_05["precision"], at_05["recall"], at_05["f1"], at_05["false_merge"]) == (1.0, 1.0, 1.0, 0.0)
    # The fake embedding puts every text without "puppy" together: pottery vs "work is busy" counts as similar.
    at_04 = next(r for r in result["cosine"] if r["threshold"] == 0.4)
    assert (at_04["precision"], at_04["recall"], at_04["false_merge"]) == (0.667, 1.0, 0.0)
    # F1 1.0 from 0.1 to 0.5 (pottery shares 0.625, the puppy 0.556): the tie goes to the higher threshold
    assert result["chosen"] == {"method": "jaccard", **at_05}

    class Stub:
        provider, model = "stub", "two-axes"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return fake_embed(texts)

    monkeypatch.setattr("shared.embeddings.providers.embedder_from_settings", lambda settings: Stub())
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([tiny_conversation()]))
    assert dedup.main(["--file", str(path), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    last = json.loads(lines[-1])
    assert last["pairs"] == 5 and last["duplicates"] == 2 and last["embedder"] == "stub:two-axes"
    # The human report is the summary's outline: the default threshold's row among its lines.
    assert "  jaccard 0 75: threshold 0.75, precision 1, recall 0, f1 0, false_merge 0" in lines


def test_an_unreadable_file_is_a_clear_exit(tmp_path: Path, capsys: Any) -> None:
    assert dedup.main(["--file", str(tmp_path / "missing.json")]) == 1
    assert "error: cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert dedup.main(["--file", str(empty)]) == 1
    assert "error: no labelled pairs" in capsys.readouterr().err
