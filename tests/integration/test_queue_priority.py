"""A transcript embedding backlog never holds up fact extraction in the process they share: the embedding drain
is one task at a time (one model call per batch, the next batch queued behind whatever else is waiting), so a
real worker (one pool process, as `engram up`'s `worker-background` on its queues) runs the queued extractions
while hundreds of transcript units still wait for their vectors."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.fake_llm import FakeLLM
from shared.embeddings.drain import token_key
from shared.infra import db
from shared.infra.redis_client import get_redis
from shared.pipeline import debounce
from shared.queueing.queues import BACKGROUND_QUEUES, broker_keys, bulk_key
from tests.conftest import CeleryStack
from tests.integration.test_ingest_pipeline import ingest
from tests.integration.test_pipeline import PIPELINE_ENV, eventually, responder
from tests.support.processes import CeleryProcess, worker

pytestmark = pytest.mark.integration

BACKLOG = 4  # sessions whose transcript units wait for their vectors
BACKLOG_MESSAGES = 150  # messages each
CHATS = 3  # sessions whose extraction is queued with that backlog


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


def _count(sql: str, session_ids: list[int]) -> int:
    with db.connection() as conn:
        row = conn.execute(sql, (session_ids,)).fetchone()
    return int(row["n"]) if row else -1


def test_extraction_runs_while_a_transcript_embedding_backlog_waits(
    api: httpx.Client, stopped_stack: CeleryStack
) -> None:
    from workers.dispatch import enqueue_extraction, request_embedding_drain  # builds the app: services first

    backlog = []
    for i in range(BACKLOG):
        said = [
            ("user" if n % 2 == 0 else "assistant", f"long-{i}: note {n} on the irrigation.")
            for n in range(BACKLOG_MESSAGES)
        ]
        ingest(api, f"long-{i}", *said)
        backlog.append(_session_id(f"long-{i}"))
    chats = []
    for i in range(CHATS):
        ingest(api, f"chat-{i}", ("user", f"I live in Lisbon and I prefer green tea ({i})."))
        chats.append(_session_id(f"chat-{i}"))
    pending_units = "SELECT count(*) AS n FROM memory_chunks WHERE session_id = ANY(%s) AND embedding IS NULL"
    unmined = "SELECT count(*) AS n FROM session_messages WHERE session_id = ANY(%s) AND extracted_at IS NULL"
    assert _count(pending_units, backlog) == BACKLOG * BACKLOG_MESSAGES

    # The drain is asked for first, then the extractions (due at once), as when a large import landed just
    # before a few sessions went quiet.
    get_redis().delete(token_key("transcript"))
    request_embedding_drain("transcript")
    client = get_redis()
    for session_id in chats:
        plan = debounce.schedule(client, "extract", session_id, debounce=0, max_wait=0)
        enqueue_extraction(session_id, plan.token, plan.countdown)

    env = stopped_stack.env("anthropic", PIPELINE_ENV)
    background: CeleryProcess = worker("prio", env, stopped_stack.log_dir, concurrency=1, queues=BACKGROUND_QUEUES)
    background.start()
    left_when_mined: list[int] = []
    try:
        background.wait_ready()

        def mined() -> bool:
            if _count(unmined, chats) != 0:
                return False
            left_when_mined.append(_count(pending_units, backlog))
            return True

        eventually(mined, timeout=120, message="the extractions did not run")
        eventually(lambda: _count(pending_units, backlog) == 0, timeout=240, message="the backlog was not embedded")
    finally:
        background.stop()
    # The extractions ran between the drain's batches, not after the whole backlog.
    assert left_when_mined[0] > BACKLOG * BACKLOG_MESSAGES // 2, left_when_mined
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


def _waiting(key: str) -> list[str]:
    return sorted(json.loads(raw)["headers"]["task"] for raw in get_redis().lrange(key, 0, -1))


def test_a_conversations_units_are_drained_in_turn_with_memory_jobs_and_a_backlog_after_them(
    api: httpx.Client, stopped_stack: CeleryStack
) -> None:
    """What the worker's BRPOP order and the KEDA scaler rely on. The drain of the few units a conversation adds
    goes at the default priority, in turn with the memory jobs (so a message is found by its meaning seconds
    after it was said, even while those jobs keep the worker busy); once more units wait than conversations add
    between two runs (an import), the next run goes at the bulk priority, after the due memory jobs. A second
    request while one is queued sends nothing."""
    from workers.dispatch import request_embedding_drain
    from workers.embeddings import embed_transcript

    transcript, memories = "engram.embeddings.embed_transcript", "engram.embeddings.embed_pending"
    client = get_redis()
    client.delete(token_key("transcript"), token_key("memories"))
    ingest(api, "chat-0", ("user", "I live in Lisbon and I prefer green tea."))  # the ingest asks for the drain
    request_embedding_drain("transcript")
    request_embedding_drain("memories")
    assert _waiting("embeddings") == [memories, transcript]
    assert _waiting(bulk_key("embeddings")) == []

    def one_batch() -> int:
        """One run of the drain, as a worker takes it from the queue (which is cleared: nothing else runs)."""
        _clear_background_queues()
        embedded: int = embed_transcript()
        return embedded

    # A conversation of 40 messages: more than one batch (16 units) but what conversations keep adding; the next
    # run stays at the default priority.
    assert one_batch() == 1
    ingest(api, "chat-1", *[("user" if n % 2 == 0 else "assistant", f"chat-1: note {n} on tea.") for n in range(40)])
    assert one_batch() == 16
    assert _waiting("embeddings") == [transcript] and _waiting(bulk_key("embeddings")) == []

    # An import of 600 messages: a backlog. After a batch the next run waits in the bulk list.
    for i in range(BACKLOG):
        said = [("user" if n % 2 == 0 else "assistant", f"long-{i}: note {n}.") for n in range(BACKLOG_MESSAGES)]
        ingest(api, f"long-{i}", *said)
    assert one_batch() == 16
    assert _waiting(bulk_key("embeddings")) == [transcript] and _waiting("embeddings") == []
