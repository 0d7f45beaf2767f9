"""ops/bench/search_scale.py's command line: `--memories N` is the one-size form of `--sizes`."""

from __future__ import annotations

import pytest

from ops.bench.search_scale import memories_per_user, parse_args


def test_memories_runs_exactly_that_one_size() -> None:
    args = parse_args(["--memories", "1000000", "--users", "10000", "--json"])
    assert args.size_list == [1000000]
    assert args.users == 10000
    assert args.json


def test_sizes_still_lists_several_sizes() -> None:
    assert parse_args(["--sizes", "10000,100000"]).size_list == [10000, 100000]


@pytest.mark.parametrize(
    "argv",
    [
        ["--memories", "1000", "--sizes", "2000"],  # two answers to one question
        ["--memories", "50", "--users", "100"],  # fewer memories than users
        ["--memories", "many"],
    ],
)
def test_contradictory_or_bad_sizes_are_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_million_over_ten_thousand_users_is_a_hundred_each() -> None:
    counts = memories_per_user(1_000_000, 10_000, 0.0)
    assert sum(counts) == 1_000_000
    assert set(counts) == {100}
