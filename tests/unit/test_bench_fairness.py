"""ops/bench/fairness.py: bad arguments are refused with a message; B's wait is split as the worker counts it."""

from __future__ import annotations

import pytest

from ops.bench.fairness import parse_args, split
from ops.bench.turns import TurnResult


@pytest.mark.parametrize("argv", [["--burst", "0"], ["--interval", "0"], ["--max-active-sessions", "-1"]])
def test_bad_arguments_are_refused_with_a_message(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert "must be" in capsys.readouterr().err


def test_the_split_counts_only_turns_that_were_done() -> None:
    results = [
        TurnResult(0, 0, "done", timings={"queued_ms": 10.0, "run_ms": 300.0}),
        TurnResult(0, 1, "done", timings={"queued_ms": 30.0, "run_ms": 500.0}),
        TurnResult(0, 2, "error", error="timeout"),
    ]
    figures = split(results)
    assert figures["queued_ms"]["n"] == 2 and figures["queued_ms"]["p50"] == 20.0
    assert figures["run_ms"]["max"] == 500.0
