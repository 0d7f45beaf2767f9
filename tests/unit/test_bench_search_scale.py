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


def test_a_heavy_user_holds_its_share_and_the_rest_is_spread_over_the_others() -> None:
    counts = memories_per_user(1_000_000, 10_000, heavy=200_000)
    assert (counts[0], sum(counts), len(counts)) == (200_000, 1_000_000, 10_000)
    assert set(counts[1:]) == {80, 81}  # 800,000 over 9,999 users
    assert memories_per_user(10, 4, heavy=4) == [4, 2, 2, 2]


def test_the_skewed_goal_command_parses() -> None:
    args = parse_args(["--memories", "1000000", "--users", "10000", "--heavy-user", "200000", "--json"])
    assert (args.heavy_user, args.ingest, args.locomo) == (200000, 300, 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["--memories", "100", "--users", "1", "--heavy-user", "50"],  # no other user
        ["--memories", "100", "--users", "10", "--heavy-user", "95"],  # nothing left for every other user
    ],
)
def test_a_heavy_user_that_leaves_no_room_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert "--heavy-user" in capsys.readouterr().err
