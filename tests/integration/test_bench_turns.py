"""ops/bench/turns.py on its own private stack, at a small size: the goals' ratios and the floor's parts."""

from __future__ import annotations

import json

import pytest

from ops.bench import turns


def test_a_small_run_reports_the_cpu_ratios_and_the_measured_floor(capsys: pytest.CaptureFixture[str]) -> None:
    assert turns.main(["--sessions", "2", "--turns", "3", "--warmup-turns", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["turns_done"] == 6 and summary["noop"]["lost"] == 0
    parts = summary["floor_parts_cpu_ms"]
    # Every part was measured (a process that did no work would show 0 CPU).
    assert set(parts) == {
        "noop_task_worker",
        "gateway_two_requests",
        "model_call_sdk",
        "embed_two_messages",
        "postgres_store_and_search",
    }
    assert all(value > 0 for value in parts.values()), parts
    assert parts["noop_task_worker"] == summary["cpu_ms_per_noop_task"]["worker"]
    assert summary["cpu_ms_per_turn_floor"] == pytest.approx(sum(parts.values()), abs=0.05)
    assert summary["floor_over_noop_worker_cpu"] == pytest.approx(
        summary["cpu_ms_per_turn_floor"] / parts["noop_task_worker"], rel=0.02
    )
