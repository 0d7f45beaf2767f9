"""Embedding work is coalesced: a burst of memories is embedded in batches (one model call per batch of
ENGRAM_EMBEDDING_BATCH_SIZE texts), every memory exactly once, and a worker killed in the middle of a
batch loses nothing. A real worker embeds through the OpenAI embeddings API of the fake server, which
sees (and can hold) every model call; the pool's /metrics counts the calls as an operator would."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.embedded import free_port
from ops.fake_llm import FakeLLM, FakeReply
from shared.access.keys import create_tenant_key
from shared.infra import db
from shared.infra.redis_client import get_redis
from tests.conftest import CeleryStack
from tests.integration.test_metrics import sample
from tests.integration.test_pipeline import eventually

pytestmark = pytest.mark.integration

BATCH = 8
MODEL = "openai/text-embedding-3-small"


@pytest.fixture
def idle_stack(celery_stack: CeleryStack, api: httpx.Client, fake_llm: FakeLLM) -> Iterator[CeleryStack]:
    """No worker runs until the test starts one, so a burst piles up; the embeddings queue starts empty."""
    celery_stack.stop()
    get_redis().delete("embeddings")
    yield celery_stack
    celery_stack.stop()  # the next test's `ensure` starts a worker with its own settings
    get_redis().delete("embeddings")


def embedding_settings(fake: FakeLLM, metrics_port: int) -> dict[str, str]:
    return {
        "ENGRAM_EMBEDDING_PROVIDER": "openai",
        "ENGRAM_EMBEDDING_BASE_URL": fake.openai_base_url,
        "ENGRAM_EMBEDDING_API_KEY": "test-key",
        "ENGRAM_EMBEDDING_MODEL": "text-embedding-3-small",
        "ENGRAM_EMBEDDING_DIMENSIONS": "64",
        "ENGRAM_EMBEDDING_BATCH_SIZE": str(BATCH),
        "ENGRAM_WORKER_METRICS_PORT": str(metrics_port),
    }


def write_burst(api: httpx.Client, n: int) -> list[int]:
    run = uuid.uuid4().hex[:8]
    ids = []
    for i in range(n):
        response = api.post(
            "/v1/users/burst-user/memories",
            json={"key": f"note-{run}-{i}", "value": f"Reference {run}{i:03d}: item number {i} of the burst."},
        )
        assert response.status_code == 201, response.text
        ids.append(response.json()["memory"]["id"])
    return ids


def embedding_requests(fake: FakeLLM) -> list[dict[str, Any]]:
    return [request.body for request in fake.requests if request.path == "/v1/embeddings"]


def chunk_counts() -> dict[int, int]:
    with db.connection() as conn:
        rows = conn.execute(
            """SELECT m.id, count(c.id) AS n FROM memories m LEFT JOIN memory_chunks c ON c.memory_id = m.id
                WHERE m.valid_until IS NULL GROUP BY m.id"""
        ).fetchall()
    return {row["id"]: row["n"] for row in rows}


def all_embedded() -> bool:
    with db.connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM memories WHERE valid_until IS NULL AND embedded_at IS NULL"
        ).fetchone()
    return row is not None and row["n"] == 0


def test_a_burst_is_embedded_in_batches_each_memory_once(
    idle_stack: CeleryStack, api: httpx.Client, fake_llm: FakeLLM
) -> None:
    n = 5 * BATCH
    ids = write_burst(api, n)
    # Forty writes asked for their embedding; one drain task is queued for all of them.
    assert get_redis().llen("embeddings") == 1

    port = free_port()
    idle_stack.ensure("anthropic", **embedding_settings(fake_llm, port))
    eventually(all_embedded, timeout=60, message="the burst was not embedded")

    requests = embedding_requests(fake_llm)
    assert len(requests) == math.ceil(n / BATCH)  # not one call per memory
    assert all(len(body["input"]) <= BATCH for body in requests)
    sent = [text for body in requests for text in body["input"]]
    assert len(sent) == len(set(sent)) == n  # every memory's text went to the model exactly once
    assert chunk_counts() == dict.fromkeys(ids, 1)

    # An operator sees the same on the pool's /metrics.
    with db.connection() as conn:
        key = create_tenant_key(conn, "tenant-a", scopes=["metrics"]).key
    scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert scrape.status_code == 200
    assert sample(scrape.text, "engram_embedding_calls_total", model=MODEL) == len(requests)
    assert sample(scrape.text, "engram_embedded_texts_total", model=MODEL) == n


def test_a_worker_killed_mid_batch_loses_nothing(idle_stack: CeleryStack, api: httpx.Client, fake_llm: FakeLLM) -> None:
    n = BATCH + 3
    ids = write_burst(api, n)
    settings = embedding_settings(fake_llm, free_port())
    fake_llm.script_embeddings(FakeReply(delay_s=60))  # the first model call hangs
    worker = idle_stack.ensure("anthropic", **settings)
    eventually(lambda: len(embedding_requests(fake_llm)) == 1, timeout=60, message="no model call")

    worker.kill_hard()  # inside the model call, with the batch's memories claimed
    assert not any(chunk_counts().values())  # nothing of the batch was written

    idle_stack.start_worker("anthropic", overrides={**settings, "ENGRAM_WORKER_METRICS_PORT": str(free_port())})
    eventually(all_embedded, timeout=60, message="the claimed memories were not embedded after a restart")
    assert chunk_counts() == dict.fromkeys(ids, 1)
    with db.connection() as conn:
        cached = conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()
    assert cached is not None and cached["n"] == n
    # The interrupted batch was embedded again; every other text once.
    sent = [text for body in embedding_requests(fake_llm)[1:] for text in body["input"]]
    assert sorted(sent) == sorted(set(sent)) and len(sent) == n
