"""ops/bench/turns.py: the CPU ratios and the floor, from the run's own CPU figures."""

from __future__ import annotations

from ops.bench.turns import engram_cpu_over_noop, floor_over_noop


def test_engram_cpu_counts_gateway_worker_and_postgres_against_the_noop_worker() -> None:
    summary = {
        "cpu_ms_per_turn": {"gateway": 4.8, "worker": 9.0, "client": 7.35, "fake-llm": 1.15, "postgres": 4.0},
        "cpu_ms_per_noop_task": {"gateway": 0.0, "worker": 1.6, "client": 2.15, "fake-llm": 0.0, "postgres": 0.1},
    }
    # 4.8 + 9.0 + 4.0 = 17.8 ms of engram's own CPU; the client and the fake model are the benchmark's.
    assert engram_cpu_over_noop(summary) == {
        "engram_cpu_ms_per_turn": 17.8,
        "noop_worker_cpu_ms_per_task": 1.6,
        "engram_cpu_over_noop_worker_cpu": 11.12,
    }


def test_no_cpu_ratio_without_postgres_or_the_noop_floor() -> None:
    # A --url run has no Postgres tree of its own; a run without the broker has no no-op tasks.
    assert engram_cpu_over_noop({"cpu_ms_per_turn": {"gateway": 1.0, "worker": 1.0}}) == {}
    assert engram_cpu_over_noop({"cpu_ms_per_turn": {"gateway": 1.0, "worker": 1.0, "postgres": 1.0}}) == {}


def test_the_floor_is_the_sum_of_its_parts_over_the_noop_task() -> None:
    parts = {"noop_task_worker": 1.2, "gateway_two_requests": 1.6, "model_call_sdk": 2.0, "embed_two_messages": 7.2}
    assert floor_over_noop(parts) == {"cpu_ms_per_turn_floor": 12.0, "floor_over_noop_worker_cpu": 10.0}
    assert floor_over_noop(None) == {}
    assert floor_over_noop({**parts, "noop_task_worker": 0.0}) == {}
