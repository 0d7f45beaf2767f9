"""A dependency that stops answering without dying (SIGSTOP): the gateway answers `503 dependency_timeout`
within its time limit instead of hanging, and once the dependency goes on (SIGCONT) the same request,
repeated as a client repeats it, runs its turn exactly once, on the same processes (no restart). A turn whose
session lease ran out while valkey was stopped is finished by the worker that ran it, with its one model call.

The Postgres here is the test's own (its postmaster and backends are stopped), and so are valkey, the
gateway and the worker: the session's shared servers must keep serving the other tests."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.bench.chaos import process_tree, stopped
from ops.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import create_key
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations
from tests.conftest import TEST_ENV, CeleryStack, wait_turn
from tests.support.processes import CeleryProcess, gateway, wait_http, worker

pytestmark = pytest.mark.integration

LIMIT_S = 3
# The hang detector: a request still unanswered this long after it was sent has hung (the limit is 3 s).
HANG_S = 60
STARTUP_S = 240


@dataclass
class StallStack:
    postgres: EmbeddedPostgres
    valkey: EmbeddedRedis
    database_url: str
    gateway: CeleryProcess
    worker: CeleryProcess
    url: str
    key: str

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with connect(self.database_url) as conn:
            return conn.execute(sql, params).fetchall()

    def postgres_pids(self) -> list[int]:
        assert self.postgres.pid is not None
        return process_tree(self.postgres.pid)


@pytest.fixture
def stall_stack(celery_stack: CeleryStack, fake_llm: FakeLLM, tmp_path: Path) -> Iterator[StallStack]:
    postgres = EmbeddedPostgres(tmp_path / "postgres")
    valkey = EmbeddedRedis(tmp_path / "valkey")
    processes: list[CeleryProcess] = []
    try:
        database_url = postgres.start()
        with connect(database_url) as conn:
            apply_migrations(conn)
            key = create_key(conn, "tenant-stall", "test")
        env = celery_stack.env(
            "anthropic",
            {
                "ENGRAM_DATABASE_URL": database_url,
                "ENGRAM_REDIS_URL": valkey.start(),
                "ENGRAM_REQUEST_TIME_LIMIT_SECONDS": str(LIMIT_S),
                # The fake's embeddings: no local model to load in the gateway.
                "ENGRAM_EMBEDDING_PROVIDER": "openai",
                "ENGRAM_EMBEDDING_BASE_URL": fake_llm.openai_base_url,
                "ENGRAM_EMBEDDING_API_KEY": "test-key",
            },
        )
        port = free_port()
        gw = gateway(env, tmp_path, port, name="stall-gateway").start()
        processes.append(gw)
        wk = worker("stall-worker", env, tmp_path, concurrency=1).start()
        processes.append(wk)
        url = f"http://127.0.0.1:{port}"
        # Generous: starting is not under test, and the machine may be busy.
        wait_http(gw, f"{url}/readyz", timeout=STARTUP_S)
        wk.wait_ready(timeout=STARTUP_S)
        yield StallStack(postgres, valkey, database_url, gw, wk, url, key)
    finally:
        for process in processes:
            process.stop()
        valkey.stop()
        postgres.stop()


def post_until_accepted(api: httpx.Client, session: str, text: str, idempotency_key: str) -> dict[str, Any]:
    """POST the turn as a client does: a 503 is repeated, with the same Idempotency-Key."""
    for _ in range(100):
        response = api.post(
            f"/v1/sessions/{session}/turns",
            json={"user_id": "stall-user", "text": text},
            headers={"Idempotency-Key": idempotency_key},
        )
        if response.status_code != 503:
            assert response.status_code in (200, 202), response.text
            return dict(response.json())
    raise AssertionError(f"still 503 after 100 tries: {response.text}")


def test_a_stalled_postgres_is_a_503_with_its_reason_and_the_turn_then_runs_once(stall_stack: StallStack) -> None:
    with httpx.Client(
        base_url=stall_stack.url, headers={"Authorization": f"Bearer {stall_stack.key}"}, timeout=HANG_S
    ) as api:
        # A turn through the healthy stack first: the pool's connections are open and idle when Postgres stops.
        warm = post_until_accepted(api, "s-stall", "before the stall", uuid.uuid4().hex)
        assert wait_turn(api, warm["turn_id"])["status"] == "done"
        gateway_pid, worker_pids = stall_stack.gateway.pids[0], stall_stack.worker.pids

        idempotency_key = uuid.uuid4().hex
        with stopped(stall_stack.postgres_pids()):
            # Not answered within HANG_S, httpx raises: the gateway hung on the stopped server.
            response = api.post(
                "/v1/sessions/s-stall/turns",
                json={"user_id": "stall-user", "text": "during the stall"},
                headers={"Idempotency-Key": idempotency_key},
            )
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["code"] == "dependency_timeout", body
            assert "ENGRAM_REQUEST_TIME_LIMIT_SECONDS" in body["detail"], body
            assert response.headers["Retry-After"].isdigit()
            # Every other request is bounded the same way, a long poll by its wait plus the limit.
            polled = api.get(f"/v1/turns/{warm['turn_id']}", params={"wait": 1})
            assert polled.status_code == 503 and polled.json()["code"] == "dependency_timeout", polled.text

        # Postgres goes on: the request that timed out may have stored its turn meanwhile; the client's
        # repeat (same Idempotency-Key) gets that turn or stores it, never a second one.
        accepted = post_until_accepted(api, "s-stall", "during the stall", idempotency_key)
        turn = wait_turn(api, accepted["turn_id"])
        assert turn["status"] == "done", turn
        assert turn["reply"] == "echo: during the stall"

    turns = stall_stack.rows(
        "SELECT t.id FROM turns t JOIN session_messages m ON m.turn_id = t.id AND m.role = 'user' WHERE m.content = %s",
        "during the stall",
    )
    assert [row["id"] for row in turns] == [accepted["turn_id"]]
    replies = stall_stack.rows(
        "SELECT content FROM session_messages WHERE turn_id = %s AND role = 'assistant'", accepted["turn_id"]
    )
    assert [row["content"] for row in replies] == ["echo: during the stall"]
    # The same processes served before and after: nothing had to be restarted.
    assert stall_stack.gateway.pids[0] == gateway_pid
    assert stall_stack.worker.pids == worker_pids


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s"
        pause.wait(0.05)


def test_a_lease_lost_while_valkey_was_stopped_is_retaken_and_the_turn_finished_with_its_one_model_call(
    stall_stack: StallStack, fake_llm: FakeLLM
) -> None:
    lease_s = float(TEST_ENV["ENGRAM_SESSION_LOCK_TTL_SECONDS"])
    text = "across the valkey stall"
    with httpx.Client(
        base_url=stall_stack.url, headers={"Authorization": f"Bearer {stall_stack.key}"}, timeout=HANG_S
    ) as api:
        warm = post_until_accepted(api, "s-lease", "before the stall", uuid.uuid4().hex)
        assert wait_turn(api, warm["turn_id"])["status"] == "done"

        # The model answers only when the test says so: the worker is inside its model call, holding the lease,
        # for as long as the test needs.
        answer = threading.Event()
        fake_llm.script(FakeReply(text=f"echo: {text}", hold=answer), match=text)
        accepted = post_until_accepted(api, "s-lease", text, uuid.uuid4().hex)
        wait_for(lambda: fake_llm.requests_matching(text), 60, "the turn's model call")

        assert stall_stack.valkey.proc is not None
        with stopped([stall_stack.valkey.proc.pid]):
            # The lease was renewed at the latest when valkey stopped; stopped past its length, it has run out
            # (valkey expires keys by the wall clock). This is the one wait on the clock: the lease is a duration.
            lapsed = time.monotonic() + lease_s + 1
            wait_for(lambda: time.monotonic() >= lapsed, lease_s + 5, "the lease running out")
        # valkey goes on: the worker's heartbeat finds its lease gone, with the model's reply still to come.
        wait_for(lambda: "lock lease lost" in stall_stack.worker.tail(100_000), 60, "the worker noticing")
        answer.set()

        turn = wait_turn(api, accepted["turn_id"])
        assert turn["status"] == "done", turn
        assert turn["reply"] == f"echo: {text}"
        assert turn["attempts"] == 1, turn  # not run again: the worker retook the lease and wrote its reply

    assert len(fake_llm.requests_matching(text)) == 1  # the model was paid once
    replies = stall_stack.rows(
        "SELECT content FROM session_messages WHERE turn_id = %s AND role = 'assistant'", accepted["turn_id"]
    )
    assert [row["content"] for row in replies] == [f"echo: {text}"]
