"""Nightly decay against real Postgres and Redis: the CLI's --as-of run, exact and idempotent decay,
protected memories, derived data, style expiry, and a run SIGKILLed mid-way that resumes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from shared.access.auth import ensure_tenant
from shared.infra.config import get_settings
from shared.infra.db import Conn
from shared.maintenance import jobs
from shared.maintenance.runs import UserRef
from shared.memory.memory_input import MemoryInput
from shared.memory.store import Scope, confirm_memory, store_memory
from tests.support.scopes import make_scope

# Decay is run by hand on memories written here: a shared worker left running by an earlier test would embed
# them meanwhile (the embedding cache the run empties would fill again).
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_shared_workers")]


@pytest.fixture
def conn(autocommit_conn: Conn) -> Conn:
    return autocommit_conn


def store(conn: Conn, scope: Scope, key: str, value: str, **fields: Any) -> dict[str, Any]:
    return store_memory(conn, scope, MemoryInput(key=key, value=value, **fields), "api").memory


def memory(conn: Conn, memory_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM memories WHERE id = %s", (memory_id,)).fetchone()
    assert row is not None
    return row


def decay_events(conn: Conn, memory_id: int) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT action, details FROM memory_events WHERE memory_id = %s AND actor = 'decay' ORDER BY id", (memory_id,)
    ).fetchall()


def add_chunk(conn: Conn, scope: Scope, memory_id: int, text: str) -> None:
    """A chunk and its cached embedding, as the embeddings worker leaves them."""
    digest = f"hash-{memory_id}"
    # The column is typed once an embedding space was set up (earlier tests may have): match its size.
    typmod = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memory_chunks'::regclass AND attname = 'embedding'"
    ).fetchone()["atttypmod"]
    dimension = typmod if typmod > 0 else 3
    vector = "[" + ",".join(["1"] + ["0"] * (dimension - 1)) + "]"
    conn.execute(
        """INSERT INTO memory_chunks (tenant_id, user_id, memory_id, text, content_hash, embedding)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (scope.tenant_id, scope.user_id, memory_id, text, digest, vector),
    )
    conn.execute(
        "INSERT INTO embedding_cache (model, dimension, content_hash, embedding) VALUES ('m', %s, %s, %s)",
        (dimension, digest, vector),
    )


def engram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )


def last_json(output: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def test_cli_decay_400_days_ahead_forgets_the_unprotected_and_a_second_run_changes_nothing(conn: Conn) -> None:
    alice = make_scope(conn)
    fact = store(conn, alice, "friend", "Caroline Smith is a friend from the climbing gym")
    confirmed = store(conn, alice, "allergy", "Allergic to peanuts")
    confirm_memory(conn, alice, confirmed["id"], "api")
    identity = store(conn, alice, "user/name", "User's name is Alice", namespace="entity/default")
    reflection = store(conn, alice, "week-1", "Alice climbs a lot lately", kind="reflection")
    add_chunk(conn, alice, fact["id"], "friend: Caroline Smith is a friend from the climbing gym")
    assert conn.execute("SELECT count(*) AS n FROM memory_entities WHERE memory_id = %s", (fact["id"],)).fetchone()["n"]

    as_of = (datetime.now(UTC) + timedelta(days=400)).isoformat()
    first = engram("jobs", "run", "decay", "--as-of", as_of, "--json")
    assert first.returncode == 0, first.stderr
    body = last_json(first.stdout)
    assert body["job"] == "decay" and body["period"] == as_of[:10] and body["status"] == "done"
    assert body["changed"] == 1 and body["deleted"] == 1 and body["examined"] == 1

    gone = memory(conn, fact["id"])
    assert gone["valid_until"] is not None
    # exp(-0.01 × 400) ≈ 0.018 < 0.05
    assert gone["confidence"] == pytest.approx(math.exp(-4), abs=1e-3)
    assert [e["action"] for e in decay_events(conn, fact["id"])] == ["delete"]
    assert (
        conn.execute("SELECT count(*) AS n FROM memory_chunks WHERE memory_id = %s", (fact["id"],)).fetchone()["n"] == 0
    )
    assert (
        conn.execute("SELECT count(*) AS n FROM memory_entities WHERE memory_id = %s", (fact["id"],)).fetchone()["n"]
        == 0
    )
    names = [r["normalized_name"] for r in conn.execute("SELECT normalized_name FROM entities").fetchall()]
    assert "caroline smith" not in names and "alice" in names  # only the forgotten memory named Caroline
    assert conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()["n"] == 0
    for spared in (confirmed, identity, reflection):
        row = memory(conn, spared["id"])
        assert row["valid_until"] is None and row["confidence"] == 1.0 and decay_events(conn, spared["id"]) == []

    second = engram("jobs", "run", "decay", "--as-of", as_of, "--json")
    assert second.returncode == 0, second.stderr
    again = last_json(second.stdout)
    assert again["changed"] == 0 and again["already_ran"] is True and again["period"] == body["period"]
    runs = conn.execute("SELECT count(*) AS n, max(attempt) AS attempts FROM job_runs WHERE job = 'decay'").fetchone()
    assert runs["n"] == 1 and runs["attempts"] == 1


def test_cli_lists_every_job_with_its_schedule(conn: Conn) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "ops.cli", "jobs", "list", "--json"], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    jobs_listed = {job["name"]: job for job in json.loads(listed.stdout)}
    assert list(jobs_listed) == ["enrichment", "consolidation", "decay", "reflection", "cache-eviction"]
    assert jobs_listed["decay"]["schedule"] == "0 4 * * *" and jobs_listed["decay"]["last_run"] is None
    table = subprocess.run(
        [sys.executable, "-m", "ops.cli", "jobs", "list"], capture_output=True, text=True, timeout=60
    )
    assert "decay" in table.stdout and "0 3 * * 0" in table.stdout and "never" in table.stdout


def test_cli_refuses_bad_input_with_a_reason(conn: Conn) -> None:
    bad_job = engram("jobs", "run", "nonsense")
    assert bad_job.returncode == 2 and "unknown job 'nonsense'" in bad_job.stderr
    bad_clock = engram("jobs", "run", "decay", "--as-of", "next tuesday")
    assert bad_clock.returncode == 2 and "ISO-8601" in bad_clock.stderr
    no_user = engram("jobs", "run", "decay", "--user", "nobody")
    assert no_user.returncode == 1 and "no user 'nobody'" in no_user.stderr
    assert conn.execute("SELECT count(*) AS n FROM job_runs").fetchone()["n"] == 0


def test_nightly_runs_decay_exactly_like_one_long_run_and_access_resets_the_clock(conn: Conn) -> None:
    alice = make_scope(conn)
    start = datetime.now(UTC)
    idle = store(conn, alice, "idle", "Owns a red bicycle")
    used = store(conn, alice, "used", "Plays the cello on Sundays")
    settings = get_settings()
    for day in range(1, 31):
        if day == 20:
            conn.execute(
                "UPDATE memories SET last_accessed_at = %s WHERE id = %s", (start + timedelta(days=20), used["id"])
            )
        jobs.run("decay", settings, as_of=start + timedelta(days=day))
    # Thirty nightly runs: exactly exp(-0.01 × 30), not the compounded exp(-0.01 × 465) of decaying
    # "days since access" again every night.
    assert memory(conn, idle["id"])["confidence"] == pytest.approx(math.exp(-0.3), abs=2e-3)
    # Used on day 20: the clock restarts at the access, so the decay not yet applied then (stored
    # confidences move in steps of at least 0.01: up to two days here) is skipped; 10 days after it count.
    used_confidence = memory(conn, used["id"])["confidence"]
    assert math.exp(-0.3) < used_confidence <= math.exp(-0.28) + 1e-5  # stored as real (float4)
    conn.execute("UPDATE memories SET last_accessed_at = %s WHERE id = %s", (start + timedelta(days=30), used["id"]))
    jobs.run("decay", settings, as_of=start + timedelta(days=31))
    assert memory(conn, used["id"])["confidence"] == used_confidence  # one day since the access: under a step
    jobs.run("decay", settings, as_of=start + timedelta(days=32))  # a night skipped: the clock catches up
    assert memory(conn, idle["id"])["confidence"] == pytest.approx(math.exp(-0.32), abs=2e-3)
    assert memory(conn, used["id"])["confidence"] == pytest.approx(used_confidence * math.exp(-0.02), abs=1e-4)
    runs = conn.execute("SELECT count(*) AS n FROM job_runs WHERE job = 'decay' AND status = 'done'").fetchone()
    assert runs["n"] == 32


def test_a_user_run_touches_only_that_user(conn: Conn) -> None:
    alice, bob = make_scope(conn, "alice"), make_scope(conn, "bob")
    a = store(conn, alice, "note", "Keeps bees")
    b = store(conn, bob, "note", "Keeps goats")
    as_of = datetime.now(UTC) + timedelta(days=400)
    result = jobs.run("decay", get_settings(), as_of=as_of, user=UserRef(alice.tenant_id, alice.user_id))
    assert result.changed == 1 and result.scope == f"user:{alice.tenant_id}:{alice.user_id}"
    assert memory(conn, a["id"])["valid_until"] is not None
    assert memory(conn, b["id"])["valid_until"] is None
    # The all-users run of the same day is a run of its own, and finds only bob's memory left to decay.
    everyone = jobs.run("decay", get_settings(), as_of=as_of)
    assert everyone.changed == 1 and memory(conn, b["id"])["valid_until"] is not None


def test_one_off_styles_expire_after_14_days_and_the_directive_is_resynthesised(conn: Conn) -> None:
    alice = make_scope(conn)
    now = datetime.now(UTC)
    styles = {
        "short-answers": ("Prefers short, direct answers", 5),
        "casual-tone": ("Writes in a casual tone", 4),
        "bullet-lists": ("Likes bullet lists", 3),
        "emoji": ("Uses lots of emoji", 1),
    }
    ids = {}
    for key, (value, count) in styles.items():
        row = store(conn, alice, key, value, kind="style", namespace="tacit/personality/style")
        conn.execute(
            "UPDATE memories SET metadata = metadata || %s WHERE id = %s",
            (Jsonb({"reinforced_count": count, "last_reinforced": now.isoformat()}), row["id"]),
        )
        ids[key] = row["id"]
    # Written as personality synthesis writes it: no other writer may store a directive.
    old = store_memory(
        conn,
        alice,
        MemoryInput(key="directive", value="You use lots of emoji.", kind="directive", namespace="tacit/personality"),
        "synthesis",
    ).memory

    result = jobs.run("decay", get_settings(), as_of=now + timedelta(days=15))
    assert result.counts["styles_expired"] == 1 and result.counts["directives_resynthesised"] == 1
    assert memory(conn, ids["emoji"])["valid_until"] is not None
    assert [e["action"] for e in decay_events(conn, ids["emoji"])] == ["delete"]
    assert all(memory(conn, ids[k])["valid_until"] is None for k in ("short-answers", "casual-tone", "bullet-lists"))
    directive = conn.execute(
        """SELECT id, value, supersedes_id FROM memories WHERE user_id = %s AND kind = 'directive'
           AND valid_until IS NULL""",
        (alice.user_id,),
    ).fetchone()
    assert directive["supersedes_id"] == old["id"] and "short, direct answers" in directive["value"]
    assert "emoji" not in directive["value"]
    assert directive["id"] in result.to_embed


def test_decay_killed_mid_run_resumes_without_double_effects(conn: Conn) -> None:
    """SIGKILL the CLI while it works through 12,000 memories in pages of 50; the second run resumes from
    the cursor its last page committed and every memory ends decayed exactly once."""
    tenant_id = ensure_tenant(conn, "default")
    created = datetime.now(UTC) - timedelta(days=1)
    conn.execute(
        """INSERT INTO users (tenant_id, external_id) SELECT %s, 'user-' || g FROM generate_series(1, 60) g""",
        (tenant_id,),
    )
    conn.execute(
        """INSERT INTO memories (tenant_id, user_id, namespace, key, value, kind, decay_rate, created_at)
           SELECT u.tenant_id, u.id, 'tacit/facts', 'fact-' || g, 'Fact number ' || g, 'fact',
                  CASE WHEN g %% 10 = 0 THEN 0.05 ELSE 0.01 END, %s
           FROM users u CROSS JOIN generate_series(1, 200) g""",
        (created,),
    )
    as_of = created + timedelta(days=60)
    env = {**os.environ, "ENGRAM_JOB_PAGE_SIZE": "50"}
    argv = [sys.executable, "-m", "ops.cli", "jobs", "run", "decay", "--as-of", as_of.isoformat(), "--json"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = conn.execute("SELECT counts FROM job_runs WHERE job = 'decay'").fetchone()
            if row is not None and row["counts"].get("examined", 0) >= 1000:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    interrupted = conn.execute("SELECT status, counts, cursor FROM job_runs WHERE job = 'decay'").fetchone()
    assert interrupted["status"] == "running" and 1000 <= interrupted["counts"]["examined"] < 12_000

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    body = last_json(rerun.stdout)
    # The counts are the whole run's, exact: each memory examined once across both attempts.
    assert body["status"] == "done" and body["examined"] == 12_000
    assert body["changed"] == body["deleted"] == 60 * 20  # rate 0.05 × 60 days → 0.0498 < 0.05
    assert body["decayed"] == 60 * 180
    run = conn.execute("SELECT attempt FROM job_runs WHERE job = 'decay'").fetchone()
    assert run["attempt"] == 2
    # No double effects: one decay event per memory, every confidence decayed by exactly 60 days.
    per_memory = conn.execute(
        """SELECT m.decay_rate, m.confidence, count(e.id) AS events FROM memories m
           LEFT JOIN memory_events e ON e.memory_id = m.id AND e.actor = 'decay'
           GROUP BY m.id"""
    ).fetchall()
    assert len(per_memory) == 12_000 and {row["events"] for row in per_memory} == {1}
    for row in per_memory:
        assert row["confidence"] == pytest.approx(math.exp(-row["decay_rate"] * 60), abs=1e-5)
