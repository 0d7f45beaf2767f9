"""ops/bench/search_scale.py's command line and how it spreads the memories over the users."""

from __future__ import annotations

import pytest

from ops.bench.search_scale import memories_per_user, parse_args


def test_the_goal_command_parses() -> None:
    args = parse_args(["--memories", "1000000", "--users", "10000", "--json"])
    assert (args.memories, args.users, args.json) == (1000000, 10000, True)


@pytest.mark.parametrize(
    "argv",
    [
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
    counts = memories_per_user(1_000_000, 10_000)
    assert sum(counts) == 1_000_000
    assert set(counts) == {100}


def test_the_remainder_goes_one_each_to_the_first_users() -> None:
    assert memories_per_user(10, 4) == [3, 3, 2, 2]
