"""Nothing is lost and nothing is duplicated when a worker, Redis or Postgres dies mid-turn; and
recovery does not wait for the stalled-turn sweep where the system can know better."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from ops.fake_llm import FakeLLM, FakeReply
from shared.infra import db
from shared.infra.locks import HeartbeatLock, session_lock_name
from shared.infra.redis_client import get_redis
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_turns import count, post_turn
from tests.integration.test_up import UpProcess, up_env  # noqa: F401  (fixture)
from tests.support.services import TestServices

pytestmark = pytest.mark.integration


def without_sweep(stack: CeleryStack) -> None:
    """Stop beat, so only the mechanism under test can resume a turn (start_beat brings it back)."""
    if stack.beat is not None:
        stack.beat.stop()


def lock_holder_pid(session_id: int, timeout: float = 30) -> int:
    """The PID named in the session lock's token (the pool process running the session's turn)."""
    deadline = time.monotonic() + timeout
    while True:
        token = get_redis().get(session_lock_name(session_id))
        if token is not None:
            return int(token.decode().split("|")[3])
        assert time.monotonic() < deadline, "no worker took the session lock"
        time.sleep(0.05)


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
    without_sweep(celery_stack)
    fake_llm.script(FakeReply(text="never delivered", delay_s=60), match="survive this")
    turn_id = post_turn(api, "s-kill", "survive this").json()["turn_id"]
    wait_for_requests(fake_llm, 1)  # the worker is inside the LLM call now

    worker.kill_hard()  # SIGKILL the worker and its pool: no ack, no cleanup
    # Its message stays unacknowledged in Redis (until the visibility timeout) and its lock until the
    # TTL: the new worker re-drives the session at start and takes over the dead holder's lock.
    celery_stack.start_worker("anthropic")

    turn = wait_turn(api, turn_id, timeout=60)
    assert turn["status"] == "done", turn
    assert turn["attempts"] == 2
    assert turn["reply"] == "echo: survive this"  # the second attempt's reply, written once
    assert assistant_messages(turn_id) == ["echo: survive this"]
    assert count("session_messages") == 2


def test_killed_turn_holder_is_taken_over_by_the_redelivered_task(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    worker = celery_stack.ensure("anthropic")
    without_sweep(celery_stack)
    fake_llm.script(FakeReply(text="never delivered", delay_s=60), match="keep me")
    accepted = post_turn(api, "s-holder", "keep me").json()
    wait_for_requests(fake_llm, 1)
    holder = lock_holder_pid(accepted["session_id"])
    assert holder in worker.pids[1:]  # a pool process, not the worker's main process

    os.kill(holder, signal.SIGKILL)  # the broker redelivers; the holder's lock would outlive it by the TTL

    turn = wait_turn(api, accepted["turn_id"], timeout=60)
    assert turn["status"] == "done", turn
    assert turn["attempts"] == 2
    assert assistant_messages(accepted["turn_id"]) == ["echo: keep me"]
    assert worker.proc is not None and worker.proc.poll() is None


def test_drain_looks_again_when_a_lock_held_elsewhere_expires(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    celery_stack.ensure("anthropic")
    without_sweep(celery_stack)
    first = post_turn(api, "s-elsewhere", "one").json()
    assert wait_turn(api, first["turn_id"])["status"] == "done"
    # A holder on another machine, whose liveness cannot be checked from here, died holding the lock.
    lock = session_lock_name(first["session_id"])
    client = get_redis()
    # The first turn's drain lets go of the lock a moment after the turn is done: wait for that, so the
    # only events on the key below are about the lock planted here.
    released_by = time.monotonic() + 60
    while client.exists(lock):
        assert time.monotonic() < released_by, "the first drain never released the session lock"
        time.sleep(0.05)
    # Keyspace events tell an expiry from a deletion: the drain must wait for the first, never do the second.
    client.config_set("notify-keyspace-events", "Egx")
    events = client.pubsub()
    events.psubscribe("__keyevent@*__:expired", "__keyevent@*__:del")
    events.get_message(timeout=5)  # the subscription confirmations
    events.get_message(timeout=5)
    try:
        client.set(lock, "o1|another-machine|pid:[1]|4242|1.00|cafe", px=3000)
        second = post_turn(api, "s-elsewhere", "two").json()  # its drain finds the lock taken

        turn = wait_turn(api, second["turn_id"], timeout=60)
        assert turn["status"] == "done", turn
        assert turn["attempts"] == 1
        assert assistant_messages(second["turn_id"]) == ["echo: two"]
        first_event = None
        while first_event is None:
            message = events.get_message(timeout=10)
            assert message is not None, "no keyspace event for the session lock"
            if message["type"] == "pmessage" and message["data"] in (lock, lock.encode()):
                first_event = message["channel"]
        # Expired by itself: nobody broke a lock whose holder it could not judge.
        assert str(first_event).rstrip("'").endswith(":expired"), first_event
    finally:
        events.close()
        client.config_set("notify-keyspace-events", "")


def test_redis_outage_turn_accepted_and_completed_after_recovery(
    api: httpx.Client, celery_stack: CeleryStack, clean_state: TestServices, fake_llm: FakeLLM
) -> None:
    services = clean_state
    if not services.can_restart:
        pytest.skip("outage tests need the embedded servers (external URLs were given)")
    worker = celery_stack.ensure("anthropic")
    celery_stack.start_beat()
    assert worker.proc is not None
    worker_pid = worker.proc.pid
    # A turn in flight when Redis goes: the worker holds its message (acks_late) through the outage.
    fake_llm.script(FakeReply(text="answered through the outage", delay_s=3), match="slow one")
    in_flight = post_turn(api, "s-redis-busy", "slow one").json()["turn_id"]
    wait_for_requests(fake_llm, 1)
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
    assert wait_turn(api, in_flight, timeout=90)["status"] == "done"
    assert assistant_messages(in_flight) == ["answered through the outage"]
    assert api.get("/readyz").status_code == 200
    # The worker rode out the outage: the same process, still running (it used to exit when
    # Redis dropped while it held a message).
    assert worker.proc.poll() is None, worker.tail()
    assert worker.proc.pid == worker_pid


def test_postgres_outage_refuses_new_turns_and_finishes_running_one(
    api: httpx.Client, workers: CeleryStack, fake_llm: FakeLLM
) -> None:
    services = workers.services
    if not services.can_restart:
        pytest.skip("outage tests need the embedded servers (external URLs were given)")
    worker = workers.worker
    assert worker is not None
    marker = "error connecting in 'engram'"  # psycopg_pool, when the worker cannot reach Postgres
    failed_connects = worker.log_path.read_text(errors="replace").count(marker)
    fake_llm.script(FakeReply(text="kept across the outage", delay_s=2), match="keep going")
    turn_id = post_turn(api, "s-pg", "keep going").json()["turn_id"]
    wait_for_requests(fake_llm, 1)

    services.stop_postgres()
    try:
        # Many readiness probes at once (load balancers, a client retrying): each names Postgres
        # alone, because the Redis check never queues behind stuck Postgres checks.
        with ThreadPoolExecutor(max_workers=30) as pool:
            probes = list(pool.map(lambda _: api.get("/readyz"), range(30)))
        assert {probe.status_code for probe in probes} == {503}
        assert [probe.json()["failing"] for probe in probes] == [["postgres"]] * 30
        refused = post_turn(api, "s-pg", "while down")
        assert refused.status_code == 503
        assert "database unavailable" in refused.json()["detail"]
        # The worker got its reply and is trying to save it while Postgres is down.
        deadline = time.monotonic() + 60
        while worker.log_path.read_text(errors="replace").count(marker) <= failed_connects:
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.1)
    finally:
        services.start_postgres()

    turn = wait_turn(api, turn_id, timeout=90)
    assert turn["status"] == "done", turn
    # The reply already paid for was kept: the save waited for Postgres instead of failing the
    # attempt and asking the model again.
    assert turn["attempts"] == 1
    assert assistant_messages(turn_id) == ["kept across the outage"]
    assert len(fake_llm.requests) == 1
    assert count("turns") == 1  # the refused request left nothing behind


def _server_pid(path: Path) -> int:
    return int(path.read_text().split()[0])


def test_engram_up_restarts_its_embedded_servers(up_env: dict[str, str]) -> None:  # noqa: F811
    data_dir = Path(up_env["ENGRAM_DATA_DIR"])
    url = f"http://127.0.0.1:{up_env['ENGRAM_PORT']}"
    up = UpProcess(up_env)
    try:
        key = up.wait_for(r"API key\s+(egm_\S+)").group(1)
        up.wait_for(r"try: engram chat")

        valkey = _server_pid(data_dir / "valkey" / "valkey.pid")
        os.kill(valkey, signal.SIGKILL)
        up.wait_for(r"embedded server restarted.*service=valkey")
        assert _server_pid(data_dir / "valkey" / "valkey.pid") != valkey
        # The dead server was reaped, not left as a defunct child of `engram up`.
        children = psutil.Process(up.proc.pid).children()
        assert valkey not in [child.pid for child in children]
        assert not [child for child in children if child.status() == psutil.STATUS_ZOMBIE]

        postmaster = _server_pid(data_dir / "postgres" / "postmaster.pid")
        os.kill(postmaster, signal.SIGKILL)
        up.wait_for(r"embedded server restarted.*service=postgres")
        assert _server_pid(data_dir / "postgres" / "postmaster.pid") != postmaster

        # Everything works again: a turn goes through the gateway, Redis, a worker and Postgres.
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            deadline = time.monotonic() + 60
            while True:
                accepted = client.post("/v1/sessions/after-crash/turns", json={"user_id": "u", "text": "hello"})
                if accepted.status_code == 202 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)  # the gateway's pool reconnecting
            assert accepted.status_code == 202, accepted.text
            turn = wait_turn(client, accepted.json()["turn_id"], timeout=60)
            assert turn["status"] == "done", turn
            assert client.get("/readyz").status_code == 200
    finally:
        assert up.stop() == 0


def test_a_task_whose_worker_died_goes_back_to_the_head_of_its_queue(services: TestServices) -> None:
    from kombu import Connection, Exchange, Queue

    from workers.broker import Transport

    queue = Queue("engram-requeue-test", Exchange("engram-requeue-test"), routing_key="engram-requeue-test")
    with Connection(services.redis_url, transport=Transport) as conn:
        channel = conn.channel()
        queue(channel).declare()
        producer = conn.Producer(channel)
        for body in ("interrupted", "sent later 1", "sent later 2"):
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue])
        bound = queue(channel)
        taken = bound.get(no_ack=False)
        assert taken is not None and taken.payload == "interrupted"
        taken.reject(requeue=True)  # what Celery does when the pool process running it was killed
        order = []
        while (message := bound.get(no_ack=False)) is not None:
            order.append(message.payload)
            message.ack()
        bound.delete()
    assert order == ["interrupted", "sent later 1", "sent later 2"]


def test_a_lapsed_lease_is_retaken_only_while_nobody_else_holds_it(clean_state: TestServices) -> None:
    client = get_redis()
    name = session_lock_name(424242)
    lock = HeartbeatLock(client, name, ttl_seconds=30)
    other = HeartbeatLock(client, name, ttl_seconds=30)
    try:
        assert lock.acquire()
        first_token = client.get(name)
        client.delete(name)  # the lease ran out (a Redis stopped past its TTL expires it the same way)
        assert lock.retake()
        assert client.get(name) not in (None, first_token)  # held again, under a fresh token
        assert not other.acquire()

        client.delete(name)
        assert other.acquire()  # another worker took the session while the lease was gone
        taken = client.get(name)
        assert not lock.retake()
        assert client.get(name) == taken  # its lock is left alone
    finally:
        lock.release()
        other.release()
    assert client.get(name) is None
