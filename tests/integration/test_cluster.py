"""`engram up --cluster` as an operator runs it: two gateways on one port, a worker pool per queue group, two
beats and Flower on one Postgres and one Redis. Turns, memory writes and searches go through both gateways
while one gateway, the turns pool and the leader beat are killed with SIGKILL; afterwards every turn has
exactly one reply, every memory was extracted and embedded exactly once, and the beat that took over the
leader lock fires the next scheduled job (seen in the maintenance pool's metrics)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ops.embedded import free_port
from ops.fake_llm import FakeLLM, FakeReply, echo_reply
from shared.infra import db
from shared.queueing.queues import POOLS
from tests.conftest import CeleryStack
from tests.integration.test_up import UpProcess, owned_processes

pytestmark = pytest.mark.integration

CLUSTER_ENV = {
    "ENGRAM_AUTO_MEMORY": "true",
    "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "1",
    "ENGRAM_EXTRACTION_MAX_WAIT_SECONDS": "4",
    "ENGRAM_BEAT_LOCK_TIMEOUT_SECONDS": "11",  # the smallest allowed: a standby takes over within ~11 s
    "ENGRAM_UP_WORKER_METRICS_PORT": "0",
    "ENGRAM_LLM_PROVIDER": "anthropic",
    # Small pools: the machine running the suite has few cores. Turns still autoscale (1 to 2 processes).
    "ENGRAM_POOL_TURNS_MIN_PROCESSES": "1",
    "ENGRAM_POOL_TURNS_MAX_PROCESSES": "2",
    "ENGRAM_POOL_MEMORY_MAX_PROCESSES": "1",
    "ENGRAM_POOL_EMBEDDINGS_MAX_PROCESSES": "1",
    # Only the sweeps (every 2 s, ENGRAM_SWEEP_INTERVAL_SECONDS of the test settings) are scheduled.
    "ENGRAM_JOB_ENRICHMENT_ENABLED": "false",
    "ENGRAM_JOB_CONSOLIDATION_ENABLED": "false",
    "ENGRAM_JOB_DECAY_ENABLED": "false",
    "ENGRAM_JOB_REFLECTION_ENABLED": "false",
    "ENGRAM_JOB_CACHE_EVICTION_ENABLED": "false",
}
TOKEN = re.compile(r"\bkw[0-9a-f]{10}\b")
SWEEP = "engram.maintenance.redrive_stalled_turns"


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def cluster_llm(body: dict[str, Any]) -> FakeReply:
    """Chat: an echo that takes a moment (so turns are in flight when the worker dies). Extraction: the
    code word of the conversation as one preference."""
    text = json.dumps(body)
    if "pick out durable memories" in json.dumps(body.get("system", "")):
        tokens = sorted(set(TOKEN.findall(text)))
        preferences = [{"key": "code-word", "value": f"Code word {tokens[0]}"}] if tokens else []
        empty: list[Any] = []
        extraction = {"preferences": preferences, "entities": empty, "decisions": empty, "styles": empty}
        return FakeReply(text=json.dumps({**extraction, "artifacts": empty}))
    return replace(echo_reply(body), delay_s=0.7)


class Cluster:
    """The running `engram up --cluster` and what the test needs to see of it."""

    flower_port = 0

    def __init__(self, up: UpProcess, run_dir: Path, port: int, key: str, metrics_key: str) -> None:
        self.up = up
        self.run_dir = run_dir
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.key = key
        self.metrics_key = metrics_key
        self.metrics_ports: dict[str, int] = {}

    def pid(self, name: str) -> int:
        return int((self.run_dir / "procs" / f"{name}.pid").read_text())

    def log(self, name: str) -> str:
        return (self.run_dir / "logs" / f"{name}.log").read_text(errors="replace")

    def gateway_pids(self) -> list[int]:
        return [self.pid(f"gateway-{i}") for i in (1, 2)]

    def served_by(self, response: httpx.Response) -> int | None:
        """The gateway process on the other end of the response's connection (read from the kernel's socket
        table while the connection is still open): no header or endpoint of the API is needed."""
        client_port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
        for pid in self.gateway_pids():
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.NoSuchProcess:
                continue
            if any(c.raddr and c.raddr.port == client_port and c.laddr.port == self.port for c in connections):
                return pid
        return None

    def request(self, method: str, path: str, **kwargs: Any) -> tuple[httpx.Response, int | None]:
        """One request on a new connection (the kernel picks a gateway for each), retried like a client
        would while a gateway dies (same Idempotency-Key, so a retried turn is the same turn)."""
        deadline = time.monotonic() + 30
        while True:
            with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30) as http:
                try:
                    response = http.request(method, path, **kwargs)
                    if response.status_code < 500:
                        return response, self.served_by(response)
                except httpx.TransportError:
                    pass  # the gateway holding this connection was killed: another connection, another gateway
            assert time.monotonic() < deadline, f"{method} {path} kept failing"
            time.sleep(0.2)

    def scrape(self, pool: str) -> str:
        port = self.metrics_ports[f"worker-{pool}"]
        headers = {"Authorization": f"Bearer {self.metrics_key}"}
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        return response.text

    def sweep_runs(self) -> float:
        """Runs of a beat-scheduled task counted by the maintenance pool (it consumes that queue)."""
        pattern = rf'^engram_task_duration_seconds_count\{{[^}}]*task="{re.escape(SWEEP)}"[^}}]*\}} (\S+)$'
        return sum(float(m.group(1)) for m in re.finditer(pattern, self.scrape("maintenance"), re.M))


@pytest.fixture
def cluster(celery_stack: CeleryStack, clean_state: object, fake_llm: FakeLLM, tmp_path: Path) -> Iterator[Cluster]:
    # The session's shared worker and beat would consume the same queues and hold the beat lock.
    celery_stack.stop()
    fake_llm.default = cluster_llm
    data_dir = tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in celery_stack.env("anthropic", CLUSTER_ENV).items() if k != "ENGRAM_WORKER_METRICS_PORT"}
    env.update({"ENGRAM_DATA_DIR": str(data_dir), "ENGRAM_PORT": str(port), "ENGRAM_FLOWER_PORT": str(free_port())})
    # Embeddings from the fake's OpenAI-compatible endpoint: each process would otherwise load the local
    # model (tens of seconds on a busy machine), and the fake counts what was embedded. The tables were
    # emptied (clean_state), so no embedding space is recorded yet.
    env.update(
        {
            "ENGRAM_EMBEDDING_PROVIDER": "openai",
            "ENGRAM_EMBEDDING_BASE_URL": fake_llm.openai_base_url,
            "ENGRAM_EMBEDDING_DIMENSIONS": "16",
        }
    )
    from shared.access.auth import DEFAULT_TENANT, ensure_tenant, generate_key, register_key

    metrics_key = generate_key()
    with db.connection() as conn:
        register_key(conn, ensure_tenant(conn, DEFAULT_TENANT), metrics_key, "prometheus", scopes=["metrics"])
    up = UpProcess(env, "--cluster")
    try:
        up.wait_for(r"engram cluster is running", timeout=150)
        key = up.wait_for(r"API key\s+(egm_\S+)").group(1)
        up.wait_for(r"Ctrl-C stops everything")
        running = Cluster(up, data_dir / "run", port, key, metrics_key)
        running.flower_port = int(env["ENGRAM_FLOWER_PORT"])
        for line in up.output:
            found = re.search(r"metrics\s+(worker-\S+)\s+http://[\d.]+:(\d+)/metrics", line)
            if found:
                running.metrics_ports[found.group(1)] = int(found.group(2))
        assert set(running.metrics_ports) == {f"worker-{pool}" for pool in POOLS}
        yield running
        assert up.stop() == 0
        assert owned_processes(data_dir / "run") == []
    finally:
        for proc in owned_processes(data_dir / "run"):
            proc.kill()
        if up.proc.poll() is None:
            up.proc.kill()


def submit(cluster: Cluster, user: str, token: str) -> tuple[int, list[int | None]]:
    """A turn carrying the user's code word and a memory written directly; the gateways that served them."""
    turn, by_turn = cluster.request(
        "POST",
        f"/v1/sessions/s-{user}/turns",
        json={"user_id": user, "text": f"Remember my code word {token} please."},
        headers={"Idempotency-Key": f"turn-{user}"},
    )
    assert turn.status_code == 202, turn.text
    memory, by_memory = cluster.request(
        "POST", f"/v1/users/{user}/memories", json={"key": "home-town", "value": f"Home town {token}x"}
    )
    assert memory.status_code in (200, 201), memory.text
    return int(turn.json()["turn_id"]), [by_turn, by_memory]


def rows(sql: str, *params: Any) -> list[dict[str, Any]]:
    with db.connection() as conn:
        return conn.execute(sql, params).fetchall()


def test_cluster_survives_killed_gateway_pool_and_leader_beat(cluster: Cluster, fake_llm: FakeLLM) -> None:
    first_gateways = set(cluster.gateway_pids())
    turns: dict[str, int] = {}
    tokens: dict[str, str] = {}
    served: list[int | None] = []

    def add_user() -> None:
        user = f"u{len(turns)}"
        tokens[user] = f"kw{uuid.uuid4().hex[:10]}"
        turns[user], by = submit(cluster, user, tokens[user])
        served.extend(by)

    # Users arrive until both gateways have served some of their requests (the kernel spreads connections).
    while len(turns) < 4 or not first_gateways <= set(served):
        assert len(turns) < 40, f"one gateway served everything: {served}"
        add_user()

    # Mid-run: a turn is being answered when the turns pool, one gateway and the leader beat die (SIGKILL).
    wait_for(lambda: rows("SELECT 1 FROM turns WHERE status = 'running'"), 60, "a turn in progress")
    # (A lock left by an earlier test's killed beat may still be running out: wait for the leader.)
    leader = wait_for(
        lambda: next((i for i in (1, 2) if "beat: Acquired lock" in cluster.log(f"beat-{i}")), None), 60, "a leader"
    )
    standby = 3 - leader
    acquired_before = {i: cluster.log(f"beat-{i}").count("beat: Acquired lock") for i in (1, 2)}
    assert "Sending due task" not in cluster.log(f"beat-{standby}")  # one leader: the standby only waited
    killed = {
        "worker-turns": cluster.pid("worker-turns"),
        "gateway-1": cluster.pid("gateway-1"),
        f"beat-{leader}": cluster.pid(f"beat-{leader}"),
    }
    for pid in killed.values():
        os.kill(pid, signal.SIGKILL)

    # Work goes on while they are down and after the supervisor has restarted them.
    for _ in range(4):
        add_user()

    # Every turn finishes, each with exactly one reply (a turn cut off mid-answer was redriven, not doubled).
    def all_done() -> bool:
        states = rows("SELECT status FROM turns WHERE id = ANY(%s)", list(turns.values()))
        assert not [s for s in states if s["status"] == "failed"], states
        return len(states) == len(turns) and all(s["status"] == "done" for s in states)

    wait_for(all_done, 120, "every turn to finish")
    replies = rows(
        """SELECT t.id, count(m.id) FILTER (WHERE m.role = 'assistant') AS replies,
                  count(m.id) FILTER (WHERE m.role = 'user') AS asked
           FROM turns t LEFT JOIN session_messages m ON m.turn_id = t.id
           WHERE t.id = ANY(%s) GROUP BY t.id""",
        list(turns.values()),
    )
    assert sorted((r["replies"], r["asked"]) for r in replies) == [(1, 1)] * len(turns)
    assert len(rows("SELECT id FROM turns")) == len(turns)  # retried submissions made no second turn

    # Every memory (extracted from the turn, written through the API) exists once and is embedded once.
    def memories() -> list[dict[str, Any]]:
        return rows(
            """SELECT u.external_id AS user, m.key, m.value, m.valid_until,
                      (SELECT count(*) FROM memory_chunks c WHERE c.memory_id = m.id) AS chunks
               FROM memories m JOIN users u ON u.id = m.user_id ORDER BY u.external_id, m.key"""
        )

    wait_for(
        lambda: len(memories()) == 2 * len(turns) and all(m["chunks"] for m in memories()),
        90,
        "every memory extracted and embedded",
    )
    expected = sorted(
        [(u, "code-word", f"Code word {t}") for u, t in tokens.items()]
        + [(u, "home-town", f"Home town {t}x") for u, t in tokens.items()]
    )
    found = memories()
    assert sorted((m["user"], m["key"], m["value"]) for m in found) == expected
    assert all(m["valid_until"] is None and m["chunks"] == 1 for m in found), found
    # Computed once each: a second indexing would have found the vector in the cache, but not a second chunk.
    batches = [r.body["input"] for r in fake_llm.requests if r.path.endswith("/embeddings")]
    embedded = [text for batch in batches for text in ([batch] if isinstance(batch, str) else batch)]
    assert all(sum(value in text for text in embedded) == 1 for _, _, value in expected), embedded
    extractions = rows(
        """SELECT s.session_key, count(c.id) AS n FROM sessions s
           LEFT JOIN llm_calls c ON c.session_id = s.id AND c.purpose = 'extraction' GROUP BY s.session_key"""
    )
    assert sorted((e["session_key"], e["n"]) for e in extractions) == sorted((f"s-{u}", 1) for u in turns)

    # Searches through both gateways, the restarted one included, find each user's memories.
    gateways_now = set(cluster.gateway_pids())
    assert killed["gateway-1"] not in gateways_now
    searched_by: set[int | None] = set()
    searches = 0
    while not gateways_now <= searched_by:
        assert searches < 60, f"searches reached only {searched_by}"
        user = list(tokens)[searches % len(tokens)]
        response, by = cluster.request("POST", f"/v1/users/{user}/memories/search", json={"query": tokens[user]})
        assert response.status_code == 200, response.text
        assert any(tokens[user] in r["value"] for r in response.json()["results"]), response.json()
        searched_by.add(by)
        searches += 1

    # The lock passed to a live beat, and the next scheduled sweep was sent and ran (maintenance metrics).
    def new_leader() -> int | None:
        counts = {i: cluster.log(f"beat-{i}").count("beat: Acquired lock") for i in (1, 2)}
        return next((i for i in (1, 2) if counts[i] > acquired_before[i]), None)

    taker = wait_for(new_leader, 60, "a beat to take the leader lock")
    runs_at_takeover = cluster.sweep_runs()
    wait_for(lambda: cluster.sweep_runs() > runs_at_takeover, 30, "the next scheduled sweep after the takeover")
    assert cluster.pid(f"beat-{taker}") != killed[f"beat-{leader}"]
    after_takeover = cluster.log(f"beat-{taker}").rsplit("beat: Acquired lock", 1)[1]
    assert "Sending due task redrive-stalled-turns" in after_takeover
    # Whichever standby asks first after the lock expired wins: the beat that stood by all along, or the
    # killed leader's replacement (restarted by the supervisor within a second, it waits like a standby).
    role = "standby" if taker == standby else "replacement"
    print(f"leader beat-{leader} killed; lock taken by beat-{taker} ({role})")

    # Flower watches the same broker and asks for its login.
    flower = f"http://127.0.0.1:{cluster.flower_port}"
    assert httpx.get(f"{flower}/healthcheck", timeout=10).status_code == 200
    assert httpx.get(f"{flower}/api/workers", timeout=10).status_code == 401

    # Worker metrics: queue depth and task latency for every pool, the restarted turns pool included.
    for pool in POOLS:
        scrape = cluster.scrape(pool)
        assert re.search(r'^engram_queue_depth\{queue="turns"\} \d', scrape, re.M), pool
        assert "engram_task_duration_seconds_bucket" in scrape, pool
    assert re.search(
        r'^engram_task_duration_seconds_count\{[^}]*task="engram\.turns\.drain"', cluster.scrape("turns"), re.M
    )
