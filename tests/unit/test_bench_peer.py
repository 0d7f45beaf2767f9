"""ops/bench/peer.py without the peer installed: input validation, alternation, figures and ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.bench import locomo_retrieval as locomo
from ops.bench import peer
from ops.bench.locomo_data import Question


def conversation(sample_id: str, questions: int) -> locomo.Conversation:
    turns = [locomo.Turn(f"D1:{i}", 1, "A", f"A: turn {i}", None) for i in range(1, 5)]
    asked = [Question(f"q{i}", 4, ("D1:1", "D1:2")) for i in range(questions)]
    return locomo.Conversation(sample_id, turns, asked)


class Stub:
    """Finds the first evidence turn only (recall 0.5) and records the order it was called in."""

    def __init__(self, name: str, calls: list[str], hit: bool) -> None:
        self.name, self.calls, self.hit = name, calls, hit

    def ingest(self, conversation: locomo.Conversation) -> None:
        self.calls.append(f"ingest {self.name}")

    def search(self, conversation: locomo.Conversation, question: str, k: int) -> list[frozenset[str]]:
        self.calls.append(f"search {self.name}")
        return [frozenset({"D1:1"}) if self.hit else frozenset()] + [frozenset()] * (k - 1)


def test_runs_alternate_and_figures_carry_recall_and_ratios() -> None:
    calls: list[str] = []
    ours, theirs = Stub("ours", calls, hit=True), Stub("theirs", calls, hit=False)
    tallies = peer.compare([ours, theirs], [conversation("c1", 2), conversation("c2", 1)], limit_questions=None)

    # Who goes first swaps per conversation (ingest) and per question (search).
    assert calls == [
        "ingest ours", "ingest theirs", "search ours", "search theirs", "search theirs", "search ours",
        "ingest theirs", "ingest ours", "search ours", "search theirs",
    ]  # fmt: skip
    summary = peer.summarise(tallies, "ours", "theirs")
    assert summary["ours"]["recall_at_10"] == 0.5
    assert summary["theirs"]["recall_at_10"] == 0.0
    assert summary["ours"]["turns"] == 8 and summary["ours"]["searches"] == 3
    assert summary["ratios"]["recall_at_10"] is None  # nothing to divide by
    assert summary["ours"]["search_p95_ms"] is not None


def test_question_limit_counts_across_conversations() -> None:
    calls: list[str] = []
    systems = [Stub("a", calls, True), Stub("b", calls, True)]
    tallies = peer.compare(systems, [conversation("c1", 2), conversation("c2", 2)], limit_questions=3)
    assert tallies["a"].recalls == [0.5, 0.5, 0.5]
    assert tallies["b"].turns == 8  # every conversation is still ingested


def test_ratios_divide_engram_by_peer() -> None:
    mine, theirs = peer.Tally(10, 2.0, [10.0, 20.0], [0.8]), peer.Tally(10, 1.0, [5.0, 10.0], [0.4])
    summary = peer.summarise({"engram": mine, "mem0": theirs}, "engram", "mem0")
    assert summary["ratios"]["recall_at_10"] == 2.0
    assert summary["ratios"]["ingest_rate"] == 0.5
    assert summary["ratios"]["search_p50"] == 2.0


def test_missing_file_is_a_message_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert peer.main([str(tmp_path / "absent.json")]) == 1
    assert "error: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["{not json", json.dumps({"a": 1}), json.dumps([]), json.dumps([{"qa": []}])])
def test_malformed_file_is_a_message_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert peer.main([str(path), "--json"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(SystemExit) as exit_info:
        peer.parse_args(["--limit-questions", "0"])
    assert exit_info.value.code == 2
