"""A maintenance job in a real Celery worker, SIGKILLed while a page is in flight: a fresh worker takes
the unacknowledged message back, the run resumes from the cursor its last page committed, and every
effect happens exactly once (docs/concepts/turns.md "Crash safety", docs/concepts/maintenance.md)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ops.fake_llm import FakeLLM, FakeReply, last_user_text
from shared.access.auth import ensure_tenant
from shared.infra import db
from tests.conftest import CeleryStack
from tests.integration.test_maintenance_beat import BEAT_ENV, wait_for
from tests.support.processes import CeleryProcess, worker

pytestmark = pytest.mark.integration

USERS = 5
LINES = 20  # user lines per session: 40 messages, two consolidation pages (30 + 10)
KILL_USER = 3  # the kill lands in the second page of this user's session
MARKER = "(kill-here)"
_LINE = re.compile(r"I like (tea\d+x\d+) with (honey\d+x\d+)")


def line(user: int, n: int) -> str:
    text = f"I like tea{user}x{n} with honey{user}x{n}."
    return f"{text} {MARKER}" if (user, n) == (KILL_USER, LINES) else text


def extraction_answer(prompt: str) -> str:
    """The fake model's extraction: one preference per 'I like …' line it was shown."""
    preferences = [
        {"key": f"likes-{tea}", "value": f"User likes {tea} with {honey}"} for tea, honey in _LINE.findall(prompt)
    ]
    empty: list[Any] = []
    return json.dumps(
        {"preferences": preferences, "entities": empty, "decisions": empty, "styles": empty, "artifacts": empty}
    )


def answer(body: dict[str, Any]) -> FakeReply:
    if "durable memories" in json.dumps(body):
        return FakeReply(text=extraction_answer(last_user_text(body)))
    return FakeReply(text='{"contradicted": []}')  # the conflict judge: nothing contradicted


def seed() -> list[int]:
    when = datetime.now(UTC) - timedelta(hours=2)  # idle long enough for the nightly sweep
    session_ids = []
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "default")
        for user in range(1, USERS + 1):
            user_id = conn.execute(
                "INSERT INTO users (tenant_id, external_id) VALUES (%s, %s) RETURNING id", (tenant_id, f"u{user}")
            ).fetchone()["id"]
            session_id = conn.execute(
                """INSERT INTO sessions (tenant_id, user_id, session_key, created_at)
                   VALUES (%s, %s, 'old', %s) RETURNING id""",
                (tenant_id, user_id, when),
            ).fetchone()["id"]
            for n in range(1, LINES + 1):
                for role, content in (("user", line(user, n)), ("assistant", "Noted!")):
                    conn.execute(
                        """INSERT INTO session_messages (tenant_id, user_id, session_id, role, content, created_at)
                           VALUES (%s, %s, %s, %s, %s, %s)""",
                        (tenant_id, user_id, session_id, role, content, when),
                    )
            session_ids.append(session_id)
    return session_ids


def run_row() -> dict[str, Any] | None:
    with db.connection() as conn:
        rows = conn.execute("SELECT * FROM job_runs WHERE job = 'consolidation'").fetchall()
    assert len(rows) <= 1, rows  # one row per (job, period), whatever happens
    return rows[0] if rows else None


def session(session_id: int) -> dict[str, Any]:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT consolidated_at, consolidated_message_id FROM sessions WHERE id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return row


def unindexed() -> int:
    with db.connection() as conn:
        row = conn.execute(
            """SELECT count(*) AS n FROM memories m
               WHERE NOT EXISTS (SELECT 1 FROM memory_chunks c WHERE c.memory_id = m.id)"""
        ).fetchone()
    return int(row["n"])


def test_a_worker_killed_mid_page_resumes_the_job_with_every_effect_exactly_once(
    celery_stack: CeleryStack, clean_state: object, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # This test runs its own worker (the session's shared one would consume the maintenance queue too).
    celery_stack.stop()
    env = celery_stack.env("anthropic", BEAT_ENV)
    started: list[CeleryProcess] = []

    def start(name: str) -> CeleryProcess:
        proc = worker(name, env, tmp_path, 1, ("maintenance", "embeddings")).start()
        started.append(proc)
        proc.wait_ready()
        return proc

    fake_llm.default = answer
    session_ids = seed()
    kill_session = session_ids[KILL_USER - 1]
    # The second page of user 3's session hangs in the model call, so the kill finds it in flight (its
    # answer is the right one, should it ever arrive: a late answer could not pass for a lost page).
    fake_llm.script(FakeReply(text=extraction_answer(f"I like tea{KILL_USER}x{LINES}"), delay_s=25), match=MARKER)
    try:
        first = start("maint-a")
        from workers.dispatch import enqueue_job

        as_of = datetime.now(UTC)
        enqueue_job("consolidation", as_of=as_of.isoformat())

        def in_flight() -> bool:
            run = run_row()
            return bool(
                run is not None
                and run["status"] == "running"
                and int(run["cursor"].get("user_id", 0)) >= 2  # users 1 and 2 committed: past page 1
                and fake_llm.requests_matching(MARKER)  # the worker is inside page 2 of user 3
            )

        wait_for(in_flight, 120, "the job to be inside the second page of user 3")
        first.kill_hard()  # SIGKILL the worker and its pool child: no ack, no cleanup, the job lock stays

        # The kill interrupted a page: its session is half read, its run unfinished.
        interrupted = run_row()
        assert interrupted is not None and interrupted["status"] == "running" and interrupted["attempt"] == 1
        assert interrupted["counts"]["sessions_consolidated"] == KILL_USER - 1
        half = session(kill_session)
        assert half["consolidated_at"] is None and half["consolidated_message_id"] > 0

        second = start("maint-b")
        done = wait_for(lambda: (r := run_row()) is not None and r["status"] == "done" and r, 120, "the resumed run")
        # The fresh worker put the dead worker's message back and resumed the same run (no beat runs here,
        # so neither the resume sweep nor a new fire did it).
        assert "put back messages left unacknowledged" in second.tail(200_000)
        assert done["attempt"] == 2 and done["as_of"] == as_of
        # The counts are the whole run's and exact: each message read once across both attempts (the page
        # in flight at the kill committed nothing and was read again).
        assert done["counts"] == {
            "messages_read": USERS * LINES * 2,
            "sessions_consolidated": USERS,
            "facts_added": USERS * LINES,
        }
        assert done["changed"] == USERS * LINES
        assert len(fake_llm.requests_matching(MARKER)) == 2  # the interrupted page, then its redo

        with db.connection() as conn:
            memories = conn.execute(
                """SELECT m.key, m.value, m.valid_until, m.source,
                          (SELECT count(*) FROM memory_events e WHERE e.memory_id = m.id) AS events
                   FROM memories m ORDER BY m.id"""
            ).fetchall()
            sessions = conn.execute(
                """SELECT s.id, s.consolidated_at, s.consolidated_message_id,
                          (SELECT max(id) FROM session_messages m WHERE m.session_id = s.id) AS last_message
                   FROM sessions s"""
            ).fetchall()
        # Exactly one fact per line, each written once (one history event), none closed or superseded.
        expected = {f"likes-tea{u}x{n}" for u in range(1, USERS + 1) for n in range(1, LINES + 1)}
        assert sorted(row["key"] for row in memories) == sorted(expected)
        assert all(row["valid_until"] is None and row["source"] == "consolidation" for row in memories)
        assert {row["events"] for row in memories} == {1}
        # Every session read to its last message and marked consolidated.
        assert all(row["consolidated_at"] is not None for row in sessions)
        assert all(row["consolidated_message_id"] == row["last_message"] for row in sessions)

        # The facts the killed attempt wrote are indexed too: the resumed attempt handed them to the
        # embeddings queue (the unindexed-memory sweep would take 15 minutes and more).
        wait_for(lambda: unindexed() == 0, 90, "every fact to be indexed")
    finally:
        for proc in started:
            proc.stop()
