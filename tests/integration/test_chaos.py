"""A reduced chaos run (ops/bench/chaos.py) as a user would start it: `engram up` with its embedded
servers and the memory pipeline on, sessions chatting while a worker process, valkey and Postgres
are SIGKILLed mid-turn. Nothing may be lost or done twice, and the servers must come back by
themselves. The benchmark waits on events (a turn running, a server answering, the pipeline idle),
so the run is the same on a slow machine, only longer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

# Short timers, as the rest of the suite uses (tests/conftest.py), so recovery paths and the
# memory pipeline finish within the run.
TIMERS = {
    "ENGRAM_SESSION_LOCK_TTL_SECONDS": "6",
    "ENGRAM_STALLED_TURN_SECONDS": "5",
    "ENGRAM_SWEEP_INTERVAL_SECONDS": "2",
    "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "1",
    "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": "5",
}


def test_chaos_under_load_loses_and_duplicates_nothing() -> None:
    argv = [
        sys.executable,
        "-m",
        "ops.bench.chaos",
        "--sessions",
        "6",
        "--turns",
        "3",
        "--worker-kills",
        "1",
        "--redis-kills",
        "1",
        "--postgres-kills",
        "1",
        "--turn-concurrency",
        "4",
        "--settle-timeout",
        "300",
        "--json",
    ]
    for key, value in TIMERS.items():
        argv += ["--env", f"{key}={value}"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    report = run.stdout + run.stderr

    assert result["turns_sent"] == 18, report
    assert result["turns_done"] == 18, report
    assert result["lost_turns"] == 0, report
    assert result["failed_turns"] == 0, report
    assert result["duplicate_replies"] == 0, report
    assert result["duplicate_user_messages"] == 0, report
    assert result["missing_replies"] == 0, report
    assert result["duplicate_memories"] == 0, report
    assert result["unmined_messages"] == 0, report
    assert result["unembedded_memories"] == 0, report
    assert result["missing_memories"] == 0, report
    assert result["settled"] is True, report
    # Each fault happened, and `engram up` brought each killed server back by itself.
    assert result["kills"] >= 1, report
    assert result["redis_kills"] >= 1 and result["redis_restarts"] >= result["redis_kills"], report
    assert result["postgres_kills"] >= 1 and result["postgres_restarts"] >= result["postgres_kills"], report
