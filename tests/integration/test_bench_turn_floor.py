"""ops/bench/turn_floor.py on its own private stack, at a small size."""

from __future__ import annotations

import json

import pytest

from ops.bench import turn_floor


def test_floor_is_the_sum_of_measured_parts_over_the_noop_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert turn_floor.main(["--tasks", "40", "--calls", "20", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    parts = summary["parts_cpu_ms"]
    # Every part was measured (a process that did no work would show 0 CPU).
    assert set(parts) == {"noop_task_worker", "gateway_two_requests", "model_call_sdk", "embed_two_messages"}
    assert all(value > 0 for value in parts.values()), parts
    assert summary["noop_tasks"] == 40
    assert summary["cpu_ms_per_turn_floor"] == pytest.approx(sum(parts.values()), abs=0.05)
    assert summary["floor_over_noop_worker_cpu"] == pytest.approx(
        summary["cpu_ms_per_turn_floor"] / parts["noop_task_worker"], rel=0.02
    )
