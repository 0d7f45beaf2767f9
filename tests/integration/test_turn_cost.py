"""What a turn costs beyond its own work (issue 13 §2): no Celery task events nobody reads, while Flower's
way of watching (broadcasting `enable_events` to the workers) still gets them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from ops.fake_llm import FakeLLM, FakeReply
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
