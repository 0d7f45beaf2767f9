"""Maintenance jobs through real Celery: two beat processes (one leader, one standby), a job fired by beat
runs once per period, the standby takes over when the leader is killed, and a long job runs in slices
that resume from its cursor."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.infra import db
from tests.conftest import CeleryStack
from tests.support.processes import CeleryProcess, beat, worker
from tests.support.shifted_clock import SHIFT_LINE, shifted_argv

pytestmark = pytest.mark.integration

# Every job but decay off; decay fires every minute, so one simulated "period" (a day) sees several fires.
BEAT_ENV = {
    "ENGRAM_JOB_DECAY_SCHEDULE": "* * * * *",
    "ENGRAM_JOB_CONSOLIDATION_ENABLED": "false",
    "ENGRAM_JOB_ENRICHMENT_ENABLED": "false",
    "ENGRAM_JOB_REFLECTION_ENABLED": "false",
    "ENGRAM_JOB_CACHE_EVICTION_ENABLED": "false",
    "ENGRAM_BEAT_LOCK_TIMEOUT_SECONDS": "12",
}


# Cron fires on whole minutes. The beats read their schedules by shifted clocks (tests/support/shifted_clock.py)
# so the test need not wait for the real ones: the leader's first minute comes LEADER_LEAD_SECONDS after it set up
# its schedule, and the standby's clock runs STANDBY_AHEAD_SECONDS ahead of the leader's, so its next minute comes
# 60 - STANDBY_AHEAD_SECONDS after the leader's fire: after the leader is killed and its lock times out (12 s,
# plus up to a 5 s retry), and well before the leader's own next minute.
LEADER_LEAD_SECONDS = 5
STANDBY_AHEAD_SECONDS = 25


def shifted_beat(env: dict[str, str], log_dir: Path, name: str, **shift: float) -> CeleryProcess:
    process = beat(env, log_dir, name=name)
    process.argv = shifted_argv(process.argv, **shift)
    return process


def clock_shift(process: CeleryProcess) -> float:
    found = SHIFT_LINE.search(process.tail(200_000))
    assert found is not None, process.tail()
    return float(found.group(1))


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def runs(job: str) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute("SELECT * FROM job_runs WHERE job = %s ORDER BY id", (job,)).fetchall()


@pytest.fixture
def maintenance_worker(
    celery_stack: CeleryStack, clean_state: object, tmp_path: Path
) -> Iterator[Callable[..., CeleryProcess]]:
    # The session's shared worker and beat (left by earlier tests) would consume the maintenance queue
    # with their own settings and hold the beat leader lock: these tests run their own processes only.
    celery_stack.stop()
    started: list[CeleryProcess] = []

    def start(**overrides: str) -> CeleryProcess:
        env = celery_stack.env("offline", {**BEAT_ENV, **overrides})
        proc = worker(f"maint{len(started)}", env, tmp_path, 1, ("maintenance", "embeddings")).start()
        started.append(proc)
        proc.wait_ready()
        return proc

    yield start
    for proc in started:
        proc.stop()


def test_two_beats_one_leader_one_run_per_period_and_the_standby_takes_over(
    celery_stack: CeleryStack, maintenance_worker: Callable[..., CeleryProcess], tmp_path: Path
) -> None:
    background = maintenance_worker()
    env = celery_stack.env("offline", BEAT_ENV)
    first = shifted_beat(env, tmp_path, "beat-a", lead=LEADER_LEAD_SECONDS).start()
    first.wait_ready("beat: Acquired lock")
    second = shifted_beat(env, tmp_path, "beat-b", offset=clock_shift(first) + STANDBY_AHEAD_SECONDS).start()
    try:
        second.wait_ready("beat: Starting...")
        # Beat fires decay at the next minute of its clock; the run's period is the day.
        done = wait_for(lambda: [r for r in runs("decay") if r["status"] == "done"], 90, "a decay run")
        assert len(done) == 1 and done[0]["scope"] == "all"
        # Only the leader sends; the standby waits for the lock.
        assert "Sending due task job-decay" in first.tail(200_000)
        assert "Sending due task" not in second.tail(200_000)
        assert "Acquired lock" not in second.tail(200_000)

        # The leader dies without releasing its lock: the standby takes over once the lock times out
        # (12 s here; ENGRAM_BEAT_LOCK_TIMEOUT_SECONDS), before the next minute of its clock.
        first.kill_hard()
        second.wait_ready("beat: Acquired lock", timeout=40)
        # That fire comes from the new leader and falls in the same period: the task finds the run done
        # and changes nothing.
        wait_for(lambda: "Sending due task job-decay" in second.tail(200_000), 90, "the standby firing decay")
        wait_for(lambda: '"already_ran": true' in background.tail(400_000), 60, "a second, no-op fire")
        assert [(r["status"], r["attempt"]) for r in runs("decay")] == [("done", 1)]
    finally:
        first.stop()
        second.stop()


def _scope(conn: Any, user: str) -> tuple[int, int]:
    from shared.access.auth import ensure_tenant
    from shared.turns.accept import ensure_user

    tenant_id = ensure_tenant(conn, "default")
    return tenant_id, ensure_user(conn, tenant_id, user)


def test_a_long_job_runs_in_slices_that_resume_from_the_cursor(
    maintenance_worker: Callable[..., CeleryProcess],
) -> None:
    """Slices of ~0 s: every task does one page and sends itself on; the run still examines each memory once."""
    maintenance_worker(ENGRAM_JOB_SLICE_SECONDS="0.001", ENGRAM_JOB_PAGE_SIZE="10")
    with db.connection() as conn:
        for user in ("ann", "ben", "cat"):
            tenant_id, user_id = _scope(conn, user)
            conn.execute(
                """INSERT INTO memories (tenant_id, user_id, namespace, key, value, created_at)
                   SELECT %s, %s, 'tacit/facts', 'fact-' || g, 'Fact ' || g, now() - interval '2 days'
                   FROM generate_series(1, 25) g""",
                (tenant_id, user_id),
            )
    from workers.dispatch import enqueue_job

    enqueue_job("decay", as_of=(datetime.now(UTC) + timedelta(days=30)).isoformat())
    done = wait_for(lambda: [r for r in runs("decay") if r["status"] == "done"], 60, "the sliced run to finish")
    # The rows were written without store_memory, as before migration 0014: the run keys each once too.
    assert done[0]["counts"] == {"content_keys_filled": 75, "examined": 75, "decayed": 75}
    assert done[0]["changed"] == 0
    assert done[0]["attempt"] > 3  # each slice resumed the run under a new attempt
    with db.connection() as conn:
        events = conn.execute("SELECT count(*) AS n FROM memory_events WHERE actor = 'decay'").fetchone()
    assert events["n"] == 75


def test_a_new_session_gets_the_previous_one_consolidated_by_the_workers(
    maintenance_worker: Callable[..., CeleryProcess],
) -> None:
    """With automatic memory on; with ENGRAM_AUTO_MEMORY=false (the suite's default) nothing is queued."""
    maintenance_worker(ENGRAM_JOB_CONSOLIDATION_ENABLED="true", ENGRAM_AUTO_MEMORY="true")
    with db.connection() as conn:
        tenant_id, user_id = _scope(conn, "dora")
        ids = []
        for key, text in (("s1", "I live in Lisbon."), ("s2", "Hello again")):
            session_id = conn.execute(
                "INSERT INTO sessions (tenant_id, user_id, session_key) VALUES (%s, %s, %s) RETURNING id",
                (tenant_id, user_id, key),
            ).fetchone()["id"]
            conn.execute(
                """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content)
                   VALUES (%s, %s, %s, 'user', %s)""",
                (tenant_id, user_id, session_id, text),
            )
            ids.append(session_id)
    from workers.app import app

    app.send_task("engram.maintenance.queue_consolidations", queue="maintenance")

    def consolidated() -> bool:
        with db.connection() as conn:
            row = conn.execute("SELECT consolidated_at FROM sessions WHERE id = %s", (ids[0],)).fetchone()
        return row["consolidated_at"] is not None

    wait_for(consolidated, 60, "the earlier session to be consolidated")
    with db.connection() as conn:
        current = conn.execute("SELECT consolidated_at FROM sessions WHERE id = %s", (ids[1],)).fetchone()
        fact = conn.execute("SELECT value, source FROM memories WHERE key = 'user/location'").fetchone()
    assert current["consolidated_at"] is None  # the session in progress is left alone
    assert (fact["value"], fact["source"]) == ("User lives in Lisbon", "consolidation")


def test_the_resume_sweep_finishes_a_run_whose_worker_died(maintenance_worker: Callable[..., CeleryProcess]) -> None:
    """A run left 'running' with nobody holding its lock (its worker was killed and the message lost) is
    sent again by the sweep and resumes under a new attempt, with its own clock."""
    maintenance_worker()
    as_of = datetime.now(UTC) + timedelta(days=400)
    with db.connection() as conn:
        tenant_id, user_id = _scope(conn, "eve")
        conn.execute(
            """INSERT INTO memories (tenant_id, user_id, namespace, key, value)
               VALUES (%s, %s, 'tacit/facts', 'k', 'v')""",
            (tenant_id, user_id),
        )
        conn.execute(
            """INSERT INTO job_runs (job, period, as_of, heartbeat_at)
               VALUES ('decay', %s, %s, now() - interval '5 minutes')""",
            (as_of.date().isoformat(), as_of),
        )
    from workers.app import app

    app.send_task("engram.maintenance.resume_job_runs", queue="maintenance")
    done = wait_for(lambda: [r for r in runs("decay") if r["status"] == "done"], 60, "the resumed run")
    assert done[0]["attempt"] == 2 and done[0]["changed"] == 1 and done[0]["as_of"] == as_of
