"""Bulk transcript indexing never holds up fact extraction in the process they share: with a backlog of
indexing tasks queued first, a real worker (one pool process, as `engram up`'s `worker-background` on its
queues) runs every queued extraction before any of them. The order is read from Postgres: the worker runs
one task at a time, so the extraction's commit and the indexing commits are ordered as the tasks ran."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM
from shared import db
from shared.pipeline import debounce
from shared.redis_client import get_redis
from tests.conftest import CeleryStack
from tests.integration.test_ingest_pipeline import ingest
from tests.integration.test_pipeline import PIPELINE_ENV, eventually, responder
from tests.support.processes import CeleryProcess, worker
from workers.queues import BACKGROUND_QUEUES, broker_keys

pytestmark = pytest.mark.integration

BACKLOG = 4  # sessions whose compacted transcript waits to be indexed
CHATS = 3  # sessions whose extraction is queued after that backlog


def _clear_background_queues() -> None:
    client = get_redis()
    client.delete(*(key for queue in BACKGROUND_QUEUES for key in broker_keys(queue)))


@pytest.fixture
def stopped_stack(celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """No worker runs until the test starts its own, so the queued work piles up in the broker."""
    celery_stack.stop()
    _clear_background_queues()
    fake_llm.default = responder()
    yield celery_stack
    _clear_background_queues()


def _session_id(key: str) -> int:
    with db.connection() as conn:
        row = conn.execute("SELECT id FROM sessions WHERE session_key = %s", (key,)).fetchone()
    assert row is not None
    return int(row["id"])


def _compacted_session(api: httpx.Client, key: str) -> int:
    """A session whose messages a compaction retired: transcript indexing has blocks to embed."""
    said = [("user" if i % 2 == 0 else "assistant", f"{key}: note {i} about the garden irrigation.") for i in range(10)]
    ingest(api, key, *said)
    session_id = _session_id(key)
    with db.connection() as conn:
        conn.execute("UPDATE session_messages SET is_compacted = true WHERE session_id = %s", (session_id,))
    return session_id


def _times(sql: str, session_ids: list[int]) -> list[datetime]:
    with db.connection() as conn:
        rows = conn.execute(sql, (session_ids,)).fetchall()
    return [row["at"] for row in rows]


def test_extraction_queued_behind_a_transcript_indexing_backlog_runs_first(
    api: httpx.Client, stopped_stack: CeleryStack
) -> None:
    from workers.dispatch import enqueue_extraction, enqueue_transcript_indexing  # builds the app: services first

    backlog = [_compacted_session(api, f"long-{i}") for i in range(BACKLOG)]
    chats = []
    for i in range(CHATS):
        ingest(api, f"chat-{i}", ("user", f"I live in Lisbon and I prefer green tea ({i})."))
        chats.append(_session_id(f"chat-{i}"))

    # The backlog is queued first, then the extractions (due at once), as when compactions finished just
    # before a few sessions went quiet.
    for session_id in backlog:
        enqueue_transcript_indexing(session_id)
    client = get_redis()
    for session_id in chats:
        plan = debounce.schedule(client, "extract", session_id, debounce=0, max_wait=0)
        enqueue_extraction(session_id, plan.token, plan.countdown)

    env = stopped_stack.env("anthropic", PIPELINE_ENV)
    background: CeleryProcess = worker("prio", env, stopped_stack.log_dir, concurrency=1, queues=BACKGROUND_QUEUES)
    background.start()
    try:
        background.wait_ready()

        def not_yet(done_column: str, sessions: list[int]) -> int:
            """Messages of `sessions` whose `done_column` (embedded_at, extracted_at) is still unset."""
            with db.connection() as conn:
                row = conn.execute(
                    f"SELECT count(*) AS n FROM session_messages WHERE session_id = ANY(%s) AND {done_column} IS NULL",
                    (sessions,),
                ).fetchone()
            return int(row["n"]) if row else -1

        eventually(
            lambda: not_yet("embedded_at", backlog) == 0 and not_yet("extracted_at", chats) == 0,
            timeout=120,
            message="the work did not finish",
        )
    finally:
        background.stop()

    extracted = _times(
        "SELECT max(extracted_at) AS at FROM session_messages WHERE session_id = ANY(%s) GROUP BY session_id",
        chats,
    )
    indexed = _times(
        "SELECT min(embedded_at) AS at FROM session_messages WHERE session_id = ANY(%s) GROUP BY session_id",
        backlog,
    )
    assert len(extracted) == CHATS and len(indexed) == BACKLOG
    # Every extraction committed before the first indexing task committed (one task at a time).
    assert max(extracted) < min(indexed), (sorted(extracted), sorted(indexed))
    with db.connection() as conn:
        memories = conn.execute("SELECT count(*) AS n FROM memories WHERE valid_until IS NULL").fetchone()
    assert memories is not None and memories["n"] > 0  # the extractions found facts, not nothing


def _extraction_messages_by_session() -> dict[int, int]:
    counts: dict[int, int] = {}
    for raw in get_redis().lrange("extraction", 0, -1):
        session_id = int(ast.literal_eval(json.loads(raw)["headers"]["kwargsrepr"])["session_id"])
        counts[session_id] = counts.get(session_id, 0) + 1
    return counts


def _unacked_sweeps() -> list[str]:
    """Sweep tasks a worker took and has not acknowledged (kombu's `unacked` hash: [message, exchange, key])."""
    held = (json.loads(raw)[0]["headers"]["task"] for raw in get_redis().hvals("unacked"))
    return [task for task in held if task == "engram.maintenance.redrive_pending_extraction"]


def test_the_pending_extraction_sweep_sends_no_second_task_for_a_late_one(
    api: httpx.Client, stopped_stack: CeleryStack
) -> None:
    """A session whose extraction task waits in a backlog is late, not lost: the sweep leaves it alone and
    schedules only the session whose task is gone."""
    from workers.app import app
    from workers.dispatch import enqueue_extraction

    sessions = {}
    for name in ("late", "lost"):
        ingest(api, name, ("user", f"I live in Lisbon ({name})."))
        sessions[name] = _session_id(name)
    with db.connection() as conn:  # unmined for longer than the sweep's threshold (2 x the cap)
        conn.execute("UPDATE session_messages SET created_at = now() - interval '10 minutes'")
    client = get_redis()
    plan = debounce.schedule(client, "extract", sessions["late"], debounce=0, max_wait=0)
    enqueue_extraction(sessions["late"], plan.token, plan.countdown)  # nobody consumes `extraction` here
    assert _extraction_messages_by_session() == {sessions["late"]: 1}

    env = stopped_stack.env("anthropic", PIPELINE_ENV)
    sweeper = worker("sweep", env, stopped_stack.log_dir, concurrency=1, queues=("maintenance",))
    sweeper.start()
    try:
        sweeper.wait_ready()
        app.send_task("engram.maintenance.redrive_pending_extraction", queue="maintenance")
        eventually(lambda: sessions["lost"] in _extraction_messages_by_session(), message="the lost one not swept")
        # The sweep's task returned (acknowledged): it sent everything it was going to send.
        eventually(lambda: client.llen("maintenance") == 0 and not _unacked_sweeps())
    finally:
        sweeper.stop()
    assert _extraction_messages_by_session() == {sessions["late"]: 1, sessions["lost"]: 1}
