"""How many sessions of one tenant may have a drain queued or running: by default as many as a turns worker runs
at once, so a deployment with one tenant (engram's default) keeps every process it starts busy."""

from __future__ import annotations

from shared.infra.config import Settings
from shared.queueing.fairness import limits


def test_unset_slots_follow_the_turns_workers_processes() -> None:
    assert limits(Settings(turn_worker_concurrency=8)).max_sessions == 8
    assert limits(Settings()).max_sessions == Settings().turn_worker_concurrency


def test_set_slots_are_kept_and_zero_turns_the_bound_off() -> None:
    assert limits(Settings(turn_worker_concurrency=8, tenant_max_active_sessions=3)).max_sessions == 3
    assert limits(Settings(turn_worker_concurrency=8, tenant_max_active_sessions=0)).max_sessions == 0
