"""Nothing is lost and nothing is duplicated when a worker, Redis or Postgres dies mid-turn."""

from __future__ import annotations

import time

import httpx
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared import db
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_turns import count, post_turn
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


def wait_for_requests(fake: FakeLLM, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(fake.requests) < n:
        assert time.monotonic() < deadline, f"the LLM saw {len(fake.requests)} requests, expected {n}"
        time.sleep(0.05)


def assistant_messages(turn_id: int) -> list[str]:
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT content FROM session_messages WHERE turn_id = %s AND role = 'assistant' ORDER BY id", (turn_id,)
        ).fetchall()
    return [row["content"] for row in rows]


def test_worker_killed_mid_turn_completes_exactly_once(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    worker = celery_stack.ensure("anthropic")
    celery_stack.start_beat()
    fake_llm.script(FakeReply(text="never delivered", delay_s=60), match="survive this")
    turn_id = post_turn(api, "s-kill", "survive this").json()["turn_id"]
    wait_for_requests(fake_llm, 1)  # the worker is inside the LLM call now

    worker.kill_hard()  # SIGKILL the worker and its pool: no ack, no cleanup
    celery_stack.start_worker("anthropic")

    turn = wait_turn(api, turn_id, timeout=90)
    assert turn["status"] == "done", turn
    assert turn["attempts"] == 2
    assert turn["reply"] == "echo: survive this"  # the second attempt's reply, written once
    assert assistant_messages(turn_id) == ["echo: survive this"]
    assert count("session_messages") == 2


def test_redis_outage_turn_accepted_and_completed_after_recovery(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    services = clean_state
    if not services.can_restart:
        pytest.skip("outage tests need the embedded servers (external URLs were given)")
    celery_stack.ensure("anthropic")
    celery_stack.start_beat()
    services.stop_redis()
    try:
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["failing"] == ["redis"]

        accepted = post_turn(api, "s-redis", "are you there?")
        assert accepted.status_code == 202  # stored in Postgres; delivery catches up later
        turn_id = accepted.json()["turn_id"]
    finally:
        services.start_redis()
    turn = wait_turn(api, turn_id, timeout=90)
    assert turn["status"] == "done", turn
    assert assistant_messages(turn_id) == ["echo: are you there?"]
    assert api.get("/readyz").status_code == 200


def test_postgres_outage_refuses_new_turns_and_finishes_running_one(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    services = workers.services
    if not services.can_restart:
        pytest.skip("outage tests need the embedded servers (external URLs were given)")
    fake_llm.script(FakeReply(text="first attempt cannot be saved", delay_s=2), match="keep going")
    turn_id = post_turn(api, "s-pg", "keep going").json()["turn_id"]
    wait_for_requests(fake_llm, 1)

    services.stop_postgres()
    try:
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["failing"] == ["postgres"]
        refused = post_turn(api, "s-pg", "while down")
        assert refused.status_code == 503
        assert "database unavailable" in refused.json()["detail"]
        time.sleep(3)  # the worker finishes its LLM call and fails to save it
    finally:
        services.start_postgres()

    turn = wait_turn(api, turn_id, timeout=90)
    assert turn["status"] == "done", turn
    assert turn["attempts"] >= 2
    assert len(assistant_messages(turn_id)) == 1
    assert count("turns") == 1  # the refused request left nothing behind
