"""ops/bench/embedders.py --context-vectors on a tiny LoCoMo-format file: every recipe is measured on the same
memories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.bench import embedders
from tests.conftest import TestServices
from tests.integration.test_bench_peer import SAMPLE


def test_recipes_are_compared_on_the_same_questions(
    clean_state: TestServices, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(SAMPLE))
    argv = ["--file", str(path), "--context-vectors", "--alphas", "0.6", "--database-url", clean_state.database_url]
    code = embedders.main([*argv, "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["questions"] == 2
    assert set(summary["recall"]) == {"concat", "lines a=0.6", "whole a=0.6"}
    # Three memories and top 10: every recipe finds every evidence turn, so none is better or worse.
    for legs in summary["recall"].values():
        assert legs["hybrid"]["recall_at_10"] == 1.0
    assert summary["recall"]["lines a=0.6"]["hybrid"]["better_worse_same"] == [0, 0, 2]
    # Each neighbouring turn is embedded once, not once per window it is in.
    costs = summary["costs"]
    assert costs["concat_texts"] == 3 and costs["lines_texts"] == 6
    assert costs["lines_chars"] < costs["concat_chars"]


def test_weights_outside_zero_to_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        embedders.main(["--file", "missing.json", "--context-vectors", "--alphas", "1.5"])
    assert exit_info.value.code == 2
    assert "between 0 and 1" in capsys.readouterr().err
