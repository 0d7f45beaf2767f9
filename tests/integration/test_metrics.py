"""A worker pool's Prometheus exporter: after a turn, one scrape of the pool shows the task's latency,
the turn's latency split, the model call and its tokens, and the queue depths; and it answers only a
key with the `metrics` scope."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.embedded import free_port
from ops.fake_llm import FakeLLM
from shared.access.keys import create_tenant_key
from shared.infra import db
from shared.infra.redis_client import get_redis
from shared.queueing.queues import INTERACTIVE_QUEUES, broker_keys
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_pipeline import eventually, responder
from tests.integration.test_turns import post_turn
from tests.support.processes import CeleryProcess, worker

pytestmark = pytest.mark.integration


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of a Prometheus text exposition (labels matched as a subset)."""
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return None


@pytest.fixture
def turns_pool(
    celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[CeleryProcess, str]]:
    """A pool like `worker-turns` (turns, channels) with its exporter on; nothing consumes the memory queues,
    so the extraction a turn schedules stays visible in the queue."""
    celery_stack.stop()  # the shared worker would consume every queue
    fake_llm.default = responder()
    port = free_port()
    env = celery_stack.env(
        "anthropic",
        {
            "ENGRAM_WORKER_METRICS_PORT": str(port),
            "ENGRAM_AUTO_MEMORY": "true",
            "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "0",
        },
    )
    pool = worker("turns-pool", env, tmp_path_factory.mktemp("pool"), concurrency=2, queues=INTERACTIVE_QUEUES)
    pool.start()
    try:
        pool.wait_ready()
        yield pool, f"http://127.0.0.1:{port}/metrics"
    finally:
        pool.stop()
        # The scheduled extraction (and the bulk task a test queues) must not run in a later test.
        get_redis().delete("extraction", *broker_keys("embeddings"))


def metrics_key(scopes: list[str]) -> str:
    with db.connection() as conn:
        return create_tenant_key(conn, "tenant-a", scopes=scopes).key


def test_a_scrape_after_a_turn_shows_latency_llm_calls_and_queue_depth(
    turns_pool: tuple[CeleryProcess, str], api: httpx.Client
) -> None:
    _pool, url = turns_pool
    key = metrics_key(["metrics"])
    turn = post_turn(api, "metered", "Hello there").json()
    assert wait_turn(api, turn["turn_id"])["status"] == "done"

    def scrape() -> str:
        response = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert response.status_code == 200, response.text
        return response.text

    # The drain task's latency is recorded after the task returns: wait for the sample, not for time.
    eventually(lambda: (sample(scrape(), "engram_task_duration_seconds_count", task="engram.turns.drain") or 0) >= 1)
    text = scrape()
    assert (
        sample(text, "engram_task_duration_seconds_count", task="engram.turns.drain", queue="turns", state="SUCCESS")
        == 1
    )
    assert sample(text, "engram_turns_finished_total", status="done") == 1
    for phase in ("queued", "model", "overhead"):
        assert sample(text, "engram_turn_phase_seconds_count", phase=phase) == 1, phase
    assert sample(text, "engram_llm_calls_total", purpose="chat", provider="anthropic", ok="true") == 1
    assert (sample(text, "engram_llm_tokens_total", purpose="chat", kind="output") or 0) > 0
    # Queue depth: the turns queue is drained; the extraction the turn scheduled waits (no pool here takes it).
    assert sample(text, "engram_queue_depth", queue="turns") == 0
    assert sample(text, "engram_queue_depth", queue="extraction") == 1


def test_the_exporter_needs_a_metrics_key(turns_pool: tuple[CeleryProcess, str]) -> None:
    _pool, url = turns_pool
    assert httpx.get(url, timeout=10).status_code == 401
    chat_only = metrics_key(["chat"])
    assert httpx.get(url, headers={"Authorization": f"Bearer {chat_only}"}, timeout=10).status_code == 403
    assert httpx.get(url, headers={"Authorization": "Bearer egm_not_a_key"}, timeout=10).status_code == 401
    scraper = metrics_key(["metrics"])
    assert httpx.get(url, headers={"Authorization": f"Bearer {scraper}"}, timeout=10).status_code == 200


def test_gateway_sql_aggregates_are_cached_between_scrapes(clean_state: Any) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from api.metrics import EngramCollector

    now = [0.0]
    registry = CollectorRegistry()
    registry.register(EngramCollector(sql_interval=60, clock=lambda: now[0]))

    def scrape() -> str:
        return generate_latest(registry).decode()

    assert sample(scrape(), "engram_memories_active") == 0
    with db.connection() as conn:
        tenant = conn.execute("INSERT INTO tenants (name) VALUES ('t') RETURNING id").fetchone()
        user = conn.execute(
            "INSERT INTO users (tenant_id, external_id) VALUES (%s, 'u') RETURNING id", (tenant["id"],)
        ).fetchone()
        conn.execute(
            "INSERT INTO memories (tenant_id, user_id, namespace, key, value) VALUES (%s, %s, 'default', 'k', 'v')",
            (tenant["id"], user["id"]),
        )
    # Within the interval a scrape is answered from the cache: no cross-tenant query per scrape.
    now[0] = 59.0
    assert sample(scrape(), "engram_memories_active") == 0
    now[0] = 60.0
    assert sample(scrape(), "engram_memories_active") == 1


def test_gateway_counts_its_requests_by_route(api: httpx.Client) -> None:
    key = metrics_key(["metrics"])
    assert post_turn(api, "counted", "hi").status_code == 202
    scraped = api.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    assert scraped.status_code == 200
    route = "/v1/sessions/{session_key}/turns"
    assert (sample(scraped.text, "engram_http_requests_total", route=route, method="POST", status="202") or 0) >= 1
    assert (sample(scraped.text, "engram_http_request_duration_seconds_count", route=route, method="POST") or 0) >= 1
    # The raw path (with the caller's session key) is never a label.
    assert "/v1/sessions/counted/turns" not in scraped.text


def test_migrate_registers_the_metrics_key_with_that_scope_only(
    clean_state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from ops.cli import app
    from shared.access.auth import authenticate
    from shared.infra.config import get_settings

    monkeypatch.setenv("ENGRAM_METRICS_API_KEY", "egm_prometheus_scraper_key_0123456789")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["migrate"])
        assert result.exit_code == 0, result.output
    finally:
        monkeypatch.delenv("ENGRAM_METRICS_API_KEY")
        get_settings.cache_clear()
    with db.connection() as conn:
        principal = authenticate(conn, "egm_prometheus_scraper_key_0123456789")
    assert principal is not None and principal.scopes == frozenset({"metrics"})
    assert principal.allows("metrics") and not principal.allows("chat")
