"""What a turn costs beyond its own work (issue 13 §2): no Celery task events nobody reads (while Flower's
way of watching, broadcasting `enable_events` to the workers, still gets them), and no transaction that
finds nothing new."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import redis

from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import ensure_tenant
from shared.agent import drain_session
from shared.infra import db
from shared.infra.config import get_settings
from shared.runtime import turn_deps
from shared.turns.accept import submit_turn
from tests.conftest import CeleryStack, wait_turn

pytestmark = pytest.mark.integration

# kombu's Redis transport publishes a fanout message to `/<db>.<exchange>/<routing key>`; Celery's task
# events go to the `celeryev` exchange with routing keys `task.sent`, `task.received`, ... (worker
# heartbeats are `worker.heartbeat`: not what this is about).
TASK_EVENTS_PATTERN = "*celeryev/task.*"


@pytest.fixture
def task_events(workers: CeleryStack) -> Iterator[redis.client.PubSub]:
    client = redis.Redis.from_url(workers.services.redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(TASK_EVENTS_PATTERN)
    try:
        yield pubsub
    finally:
        pubsub.close()
        client.close()


def received(pubsub: redis.client.PubSub, seconds: float) -> list[str]:
    """The task event channels published to within `seconds` (reads until then, so late events count)."""
    channels: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=left)
        if message is not None:
            channels.append(message["channel"].decode())
    return channels


def run_turn(api: httpx.Client, session: str) -> None:
    accepted = api.post(f"/v1/sessions/{session}/turns", json={"user_id": "alice", "text": "Hi there."})
    assert accepted.status_code == 202
    assert wait_turn(api, accepted.json()["turn_id"])["status"] == "done"


def test_a_turn_sends_no_task_events_unless_a_monitor_asks(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM, task_events: redis.client.PubSub
) -> None:
    from workers.app import app

    fake_llm.script(FakeReply(text="Hello."))
    run_turn(api, "quiet")
    # The worker's follow-up tasks (extraction, embeddings) run shortly after the turn: give them time.
    assert received(task_events, 2.0) == []

    # What Flower does every 5 s while it runs: the workers send task events from then on.
    app.control.enable_events()
    try:
        run_turn(api, "watched")
        channels = received(task_events, 2.0)
    finally:
        app.control.disable_events()
    # The worker batches them (`task.multi`): the drain's received/started/succeeded.
    assert channels, "no task events after enable_events"


# ---------------------------------------------------------------------------------------------------
# Transactions per turn


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every db.connection() transaction this process opens, by the function that opened it."""
    opened: list[str] = []
    real = db.connection

    @contextmanager
    def counting(*args: Any, **kwargs: Any) -> Iterator[db.Conn]:
        opened.append(sys._getframe(2).f_code.co_name)
        with real(*args, **kwargs) as conn:
            yield conn

    monkeypatch.setattr(db, "connection", counting)
    return opened


def queue_turns(session_key: str, *texts: str) -> int:
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, "tenant-cost")
        for text in texts:
            submitted = submit_turn(
                conn, tenant_id=tenant_id, session_key=session_key, user_external_id="bob", text=text
            )
    return int(submitted.turn["session_id"])


def statuses(session_id: int) -> list[str]:
    with db.connection() as conn:
        rows = conn.execute("SELECT status FROM turns WHERE session_id = %s ORDER BY id", (session_id,)).fetchall()
    return [row["status"] for row in rows]


# No shared worker or beat: a beat an earlier test started sweeps pending transcript units and requests their
# embedding drain, whose token then stops the drain this turn asks for from being sent (the list below).
@pytest.mark.usefixtures("no_shared_workers", "clean_state")
def test_a_turn_runs_in_five_transactions(transactions: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import dispatch
    from workers.turns import after_turn

    monkeypatch.setenv("ENGRAM_AUTO_MEMORY", "true")  # the memory work scheduled after the turn is counted too
    get_settings.cache_clear()
    # The memory work's tasks are recorded, not sent: a real debounced extraction would outlive this test
    # in the shared broker.
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(dispatch.app, "send_task", lambda name, kwargs=None, **_: sent.append((name, kwargs or {})))
    session_id = queue_turns("cost-1", "Hello, I like tea.")
    transactions.clear()
    outcome = drain_session(session_id, turn_deps(after_turn=after_turn))
    assert outcome.processed == 1 and statuses(session_id) == ["done"]
    # The embedding drain for the turn's transcript units, then the debounced extraction.
    assert [(name, kwargs.get("session_id")) for name, kwargs in sent] == [
        ("engram.embeddings.embed_transcript", None),
        ("engram.extraction.extract", session_id),
    ]
    transactions.pop()  # statuses()
    # claim; read the context; the model call's ledger row; the guarded write (which returns the session row
    # the memory work is planned from, and tells whether another turn is open); the look after the release.
    # Before: also a claim that found nothing and a read of the session row for the memory work (7).
    assert transactions == [
        "claim_next_turn",
        "_run_claimed_turn",
        "record_call",
        "_run_claimed_turn",
        "has_open_turns",
    ], transactions


@pytest.mark.usefixtures("clean_state")
def test_turns_queued_together_are_all_run_by_one_drain(transactions: list[str]) -> None:
    session_id = queue_turns("cost-2", "One.", "Two.", "Three.")
    outcome = drain_session(session_id, turn_deps())
    assert outcome.processed == 3 and statuses(session_id) == ["done", "done", "done"]
    # Each turn's last transaction saw the next one open, so the drain claimed again; after the third it did not.
    assert transactions.count("claim_next_turn") == 3
