"""The soak's verdicts: a window whose p95 strays from the others fails flatness, errors are counted where they
happened, and one window after warm-up is not enough to call latency flat."""

from __future__ import annotations

from ops.bench.soak import Calibration, Sample, flatness, windows


def _samples(window_s: float, p95s: list[float], op: str = "turn") -> list[Sample]:
    out = []
    for index, slow in enumerate(p95s):
        start = index * window_s
        # 19 fast samples and one at `slow`: the window's p95 sits between them.
        out += [Sample(start + i, op, 10.0, True) for i in range(19)]
        out.append(Sample(start + 19, op, slow, True))
    return out


def test_windows_split_samples_by_when_they_were_due_and_count_errors_there() -> None:
    samples = _samples(60, [100, 100, 100])
    samples.append(Sample(130.0, "search", 5.0, False))
    table = windows(samples, 60, 3)
    assert [w["operations"] for w in table] == [20, 20, 21]
    assert [w["errors"] for w in table] == [0, 0, 1]
    assert set(table[2]["p95_ms"]) == {"search", "turn"}


def test_a_window_that_strays_more_than_a_fifth_from_the_median_is_not_flat() -> None:
    steady = windows(_samples(60, [100, 100, 100, 105]), 60, 4)
    creeping = windows(_samples(60, [100, 100, 100, 300]), 60, 4)
    steady_distance, creeping_distance = flatness(steady[1:])["turn"], flatness(creeping[1:])["turn"]
    assert steady_distance is not None and steady_distance <= 0.2
    assert creeping_distance is not None and creeping_distance > 0.2


def test_one_window_after_warm_up_gives_no_verdict() -> None:
    table = windows(_samples(60, [100, 100]), 60, 2)
    assert flatness(table[1:]) == {"turn": None}


def test_the_sustainable_rate_counts_the_time_the_background_needed_to_catch_up() -> None:
    caught_up = Calibration(rounds=600, loop_s=60.0, settle_s=0.0, settled=True)
    behind = Calibration(rounds=600, loop_s=60.0, settle_s=60.0, settled=True)
    assert caught_up.sustainable_per_s == caught_up.answered_per_s == 10.0
    assert behind.answered_per_s == 10.0 and behind.sustainable_per_s == 5.0
