"""engram over Redis Sentinel: a valkey primary, a replica and three sentinels. The gateway, two workers
and beat find the primary through the sentinels (ENGRAM_REDIS_SENTINELS, no ENGRAM_REDIS_URL). The primary
is SIGKILLed while sessions chat; the sentinels promote the replica and the same processes carry on:
every turn is done exactly once, every event stream ends, nothing is restarted.

Postgres, valkey, the gateway and the workers are the test's own: the session's servers keep serving
the other tests."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.sentinel

from ops.embedded import EmbeddedPostgres, free_port
from ops.fake_llm import FakeLLM
from shared.access.auth import create_key
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations
from tests.conftest import BEAT_ENV, CeleryStack
from tests.support.processes import CeleryProcess, beat, gateway, wait_http, worker
from tests.support.sentinel import SERVICE, SentinelCluster

pytestmark = pytest.mark.integration

STARTUP_S = 240
SESSIONS = 4
TURNS = 4
TURN_DEADLINE_S = 90
LOAD_DEADLINE_S = 150  # for all sessions' turns, within the test time limit
# A stream that sends nothing for this long has hung (the gateway pings every 15 s).
STREAM_READ_S = 40
LATENCY_S = 0.3  # the model's: turns are running when the primary dies


@dataclass
class Stack:
    cluster: SentinelCluster
    database_url: str
    url: str
    key: str
    processes: list[CeleryProcess]

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        with connect(self.database_url) as conn:
            return conn.execute(sql, params).fetchall()

    def redis(self) -> redis.Redis:
        """A client of whichever server the sentinels call primary now."""
        sentinels = [("127.0.0.1", self.cluster.ports[f"sentinel{i}"]) for i in range(3)]
        return redis.sentinel.Sentinel(sentinels, socket_timeout=2).master_for(SERVICE, socket_timeout=2)


@pytest.fixture
def stack(celery_stack: CeleryStack, fake_llm: FakeLLM, tmp_path: Path) -> Iterator[Stack]:
    cluster = SentinelCluster(tmp_path / "redis")
    postgres = EmbeddedPostgres(tmp_path / "postgres")
    processes: list[CeleryProcess] = []
    fake_llm.latency_s = LATENCY_S
    try:
        cluster.start()
        database_url = postgres.start()
        with connect(database_url) as conn:
            apply_migrations(conn)
            key = create_key(conn, "tenant-sentinel", "test")
        env = celery_stack.env(
            "anthropic",
            {
                "ENGRAM_DATABASE_URL": database_url,
                "ENGRAM_REDIS_SENTINELS": cluster.sentinel_addresses,
                "ENGRAM_REDIS_SENTINEL_SERVICE": SERVICE,
                "ENGRAM_EMBEDDING_PROVIDER": "openai",
                "ENGRAM_EMBEDDING_BASE_URL": fake_llm.openai_base_url,
                "ENGRAM_EMBEDDING_API_KEY": "test-key",
            },
        )
        env.pop("ENGRAM_REDIS_URL")  # nothing may fall back to the session's single server
        port = free_port()
        gw = gateway(env, tmp_path, port, name="sentinel-gateway").start()
        processes.append(gw)
        for name, concurrency in (("sentinel-w1", 2), ("sentinel-w2", 1)):
            processes.append(worker(name, env, tmp_path, concurrency=concurrency).start())
        bt = beat({**env, **BEAT_ENV}, tmp_path, name="sentinel-beat").start()
        processes.append(bt)
        url = f"http://127.0.0.1:{port}"
        wait_http(gw, f"{url}/readyz", timeout=STARTUP_S)
        for process in processes[1:3]:
            process.wait_ready(timeout=STARTUP_S)
        bt.wait_ready("beat: Starting...", timeout=STARTUP_S)
        yield Stack(cluster, database_url, url, key, processes)
    finally:
        fake_llm.latency_s = 0.0
        for process in processes:
            process.stop()
        cluster.stop()
        postgres.stop()


@dataclass
class Outcome:
    session: str
    text: str
    turn_id: int | None = None
    status: str = "not sent"
    streamed: str = ""  # how the event stream ended: "done", "error", "closed", "hung"
    retries: int = 0
    errors: list[str] = field(default_factory=list)


def _retrying(outcome: Outcome, deadline: float, send: Any) -> httpx.Response | None:
    """As a client does: a 503 or a dropped connection is tried again."""
    while time.monotonic() < deadline:
        try:
            response: httpx.Response = send()
        except httpx.HTTPError as exc:
            outcome.errors.append(f"{type(exc).__name__}: {exc}")
        else:
            if response.status_code != 503:
                return response
        outcome.retries += 1
        time.sleep(0.3)
    return None


def _stream(http: httpx.Client, outcome: Outcome) -> None:
    """Read the turn's event stream to its end; a read that waits past STREAM_READ_S is a hang."""
    event = ""
    try:
        with http.stream(
            "GET", f"/v1/turns/{outcome.turn_id}/events", timeout=httpx.Timeout(10, read=STREAM_READ_S)
        ) as response:
            if response.status_code != 200:
                outcome.streamed = f"status {response.status_code}"
                return
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                    if event in ("done", "error"):
                        outcome.streamed = event
                        return
        outcome.streamed = "closed"
    except httpx.ReadTimeout:
        outcome.streamed = "hung"
    except httpx.HTTPError as exc:
        outcome.streamed = "closed"
        outcome.errors.append(f"stream: {type(exc).__name__}: {exc}")


def run_session(stack: Stack, session: str, texts: list[str], outcomes: list[Outcome], stream: bool) -> None:
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=30) as http:
        for text in texts:
            outcome = Outcome(session, text)
            outcomes.append(outcome)
            deadline = time.monotonic() + TURN_DEADLINE_S
            idempotency_key = uuid.uuid4().hex
            response = _retrying(
                outcome,
                deadline,
                lambda text=text, idempotency_key=idempotency_key: http.post(
                    f"/v1/sessions/{session}/turns",
                    json={"user_id": f"user-{session}", "text": text},
                    headers={"Idempotency-Key": idempotency_key},
                ),
            )
            if response is None or response.status_code >= 400:
                outcome.status = "refused" if response is not None else "timeout"
                return
            outcome.turn_id = int(response.json()["turn_id"])
            if stream:
                _stream(http, outcome)
            while time.monotonic() < deadline:
                polled = _retrying(
                    outcome,
                    deadline,
                    lambda turn_id=outcome.turn_id: http.get(f"/v1/turns/{turn_id}", params={"wait": 5}),
                )
                if polled is None:
                    break
                outcome.status = polled.json()["status"]
                if outcome.status in ("done", "failed"):
                    break
            if outcome.status != "done":
                return


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout}s")
        time.sleep(0.1)


def test_a_primary_killed_under_load_is_replaced_and_every_turn_is_done_once(stack: Stack) -> None:
    pids = {process.name: process.pids[0] for process in stack.processes}
    first_primary = stack.cluster.ports["primary"]
    assert stack.cluster.primary_port() == first_primary

    plans = {f"s{i}": [f"turn {n} of session {i}" for n in range(TURNS)] for i in range(SESSIONS)}
    outcomes: list[Outcome] = []
    threads = [
        threading.Thread(target=run_session, args=(stack, session, texts, outcomes, index % 2 == 0), daemon=True)
        for index, (session, texts) in enumerate(plans.items())
    ]
    for thread in threads:
        thread.start()

    # The primary dies with turns done behind it and others running on the workers.
    def under_load() -> bool:
        row = stack.rows(
            "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
            " count(*) FILTER (WHERE status = 'running') AS running FROM turns"
        )[0]
        return int(row["done"]) >= SESSIONS and int(row["running"]) >= 1

    wait_for(under_load, 120, "no turn running with others done")
    stack.cluster.kill_primary()
    stack.cluster.wait_promoted(timeout=60)
    assert stack.cluster.primary_port() == stack.cluster.ports["replica"]

    deadline = time.monotonic() + LOAD_DEADLINE_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a session's client is still waiting"

    # New sessions after the failover run on the same processes (nothing restarted).
    after: list[Outcome] = []
    run_session(stack, "after-1", ["after the failover"], after, stream=True)
    run_session(stack, "after-2", ["after the failover too"], after, stream=False)

    report = "\n".join(
        f"{o.session} {o.text!r}: turn {o.turn_id} {o.status}, stream {o.streamed or '-'}, "
        f"{o.retries} retries {o.errors[-2:]}"
        for o in [*outcomes, *after]
    )
    planned = sum(len(texts) for texts in plans.values())
    assert len(outcomes) == planned, report
    assert all(o.status == "done" for o in [*outcomes, *after]), report
    # Event streams: each one ended with the turn's outcome; none hung.
    streamed = [o for o in [*outcomes, *after] if o.session in ("s0", "s2", "after-1")]
    assert streamed and all(o.streamed == "done" for o in streamed), report

    # Exactly once, from Postgres: one turn per sent turn, each with one user message and one reply.
    turns = stack.rows(
        """SELECT t.id, t.status, s.session_key AS session,
                  (SELECT count(*) FROM session_messages m WHERE m.turn_id = t.id AND m.role = 'user') AS users,
                  (SELECT array_agg(m.content) FROM session_messages m
                    WHERE m.turn_id = t.id AND m.role = 'assistant') AS replies
           FROM turns t JOIN sessions s ON s.id = t.session_id"""
    )
    assert len(turns) == planned + len(after), (turns, report)
    sent = {o.turn_id: o.text for o in [*outcomes, *after]}
    for turn in turns:
        assert turn["status"] == "done", turn
        assert turn["users"] == 1, turn
        assert turn["replies"] == [f"echo: {sent[turn['id']]}"], turn

    # Locks: every session lock was released (none left to a worker that lost it) on the new primary.
    client = stack.redis()
    wait_for(lambda: not list(client.scan_iter("engram:lock:session:*")), 30, "session locks still held")
    assert client.info("server")["tcp_port"] == stack.cluster.ports["replica"]

    # The same processes, all still running.
    for process in stack.processes:
        assert process.proc is not None and process.proc.poll() is None, f"{process.name} exited:\n{process.tail()}"
        assert process.pids[0] == pids[process.name]
