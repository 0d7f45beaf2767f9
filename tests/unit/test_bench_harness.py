"""ops/bench/harness.py: the one percentile definition, the --json convention, the error exit and the
cleanup every benchmark relies on."""

from __future__ import annotations

import importlib
import json
import os
import signal
from pathlib import Path

import pytest

from ops.bench.harness import BenchError, BenchRun, distribution, emit, outline, percentile, ratio, run_main


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)  # position 2.85: 3 + 0.85 * (4 - 3)
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)  # not simply the maximum


def test_percentile_of_nothing_is_none_and_of_one_value_is_that_value() -> None:
    assert percentile([], 50) is None
    assert percentile([7.5], 50) == 7.5
    assert percentile([7.5], 99) == 7.5


def test_distribution_rounds_and_counts() -> None:
    assert distribution([1.0, 2.0, 3.0, 4.0], (50, 99)) == {"p50": 2.5, "p99": 4.0, "max": 4.0, "n": 4}
    assert distribution([]) == {"p50": None, "p95": None, "p99": None, "max": None, "n": 0}


def test_ratio_is_none_without_a_denominator() -> None:
    assert ratio(1.0, 3.0) == 0.33
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 2.0) is None


def test_emit_puts_exactly_one_json_object_on_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    emit("report line one\nreport line two", {"p50_ms": 1.5, "nested": {"n": 2}, "path": Path("/x")}, True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["report line one", "report line two"]
    assert len(lines) == 3
    assert json.loads(lines[-1]) == {"p50_ms": 1.5, "nested": {"n": 2}, "path": "/x"}


def test_emit_without_json_prints_only_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    emit("just the report", {"a": 1}, False)
    assert capsys.readouterr().out == "just the report\n"


def test_run_main_turns_a_bench_error_into_exit_1_and_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    def main() -> int:
        raise BenchError("the gateway was not ready within 60s")

    assert run_main(main) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: the gateway was not ready within 60s\n"
    assert "Traceback" not in captured.err + captured.out


def test_run_main_maps_an_interrupt_to_130_and_passes_the_exit_code_through() -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_main(interrupted) == 130
    assert run_main(lambda: 3) == 3


def test_bench_run_removes_the_workdir_and_undoes_in_reverse_order() -> None:
    undone: list[str] = []
    with BenchRun() as run:
        workdir = run.workdir("engram-test-harness-")
        (workdir / "log").write_text("x")
        run.callback(undone.append, "stack")
        run.callback(undone.append, "sampler")
        assert workdir.is_dir() and (workdir.stat().st_mode & 0o777) == 0o755
    assert undone == ["sampler", "stack"]
    assert not workdir.exists()


def test_bench_run_keeps_the_workdir_after_a_bench_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BenchError), BenchRun() as run:
        workdir = run.workdir("engram-test-harness-")
        raise BenchError("worker died")
    try:
        assert workdir.is_dir()
        assert f"logs and data kept in {workdir}" in capsys.readouterr().err
    finally:
        workdir.rmdir()


def test_bench_run_turns_sigterm_into_an_interrupt_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stopped: list[bool] = []
    with pytest.raises(KeyboardInterrupt), BenchRun() as run:
        run.callback(lambda: stopped.append(signal.getsignal(signal.SIGINT) == signal.SIG_IGN))
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()  # the handler raises before this returns
    assert stopped == [True]  # cleanup ran with Ctrl-C ignored
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_memory_sampler_sees_a_peak_that_is_gone_by_the_end() -> None:
    import os

    from ops.bench.harness import MemorySampler

    with MemorySampler({"me": os.getpid()}, interval=0.01, tree=False, pss=False) as sampler:
        before = sampler.peaks["me"].rss
        ballast = bytearray(64 * 1024 * 1024)
        sampler.sample()
        del ballast
    peak = sampler.peaks["me"]
    assert peak.rss >= before + 60 * 1024 * 1024
    assert peak.processes == 1
    assert peak.figures()["peak_rss_mb"] == round(peak.rss / 2**20, 1)


def test_cpu_seconds_counts_a_reaped_child_in_its_parents_tree_but_not_for_the_own_process() -> None:
    import os
    import subprocess
    import sys

    from ops.bench.harness import cpu_seconds

    before = cpu_seconds({"tree": os.getpid(), "own": os.getpid()}, own="own")
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    after = cpu_seconds({"tree": os.getpid(), "own": os.getpid()}, own="own")
    child = (after["tree"] - before["tree"]) - (after["own"] - before["own"])
    assert child > 0.05
    assert cpu_seconds({"gone": 2**22 + 12345}) == {"gone": 0.0}


BENCHMARKS = sorted(
    path.stem for path in (Path(__file__).parents[2] / "ops" / "bench").glob("*.py") if "def main(" in path.read_text()
)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_takes_the_json_flag(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # One convention for all (`--json`: the figures as one JSON object on the last line); a benchmark
    # that refused the flag made scripts that pass it to every benchmark fail on that one.
    module = importlib.import_module(f"ops.bench.{name}")
    with pytest.raises(SystemExit) as exit:
        module.main(["--help"])
    assert exit.value.code == 0 and "--json" in capsys.readouterr().out


def test_outline_writes_every_figure_once_nested_under_its_section():
    text = outline(
        "pipeline",
        {
            "calls_per_100_turns": 26.4,
            "lag": {"facts": {"p50": 1.0, "p95": 20.1}, "units": {"p95": None}},
            "by_purpose": {"extraction": 14},
            "runs": [{"n": 2}],
        },
    )
    assert text.splitlines() == [
        "pipeline",
        "  calls per 100 turns: 26.4",
        "  lag:",
        "    facts: p50 1, p95 20.1",
        "    units: p95 -",
        "  by purpose: extraction 14",
        "  runs:",
        "    - n 2",
    ]
