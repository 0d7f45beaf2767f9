"""Every metric the Grafana dashboard queries exists in a real scrape: the gateway's /metrics and a
worker pool's exporter, after a turn whose memories were extracted and embedded."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ops.embedded import free_port
from ops.fake_llm import FakeLLM
from tests.conftest import CeleryStack, wait_turn
from tests.integration.test_metrics import metrics_key
from tests.integration.test_pipeline import PIPELINE_ENV, eventually, responder
from tests.integration.test_turns import post_turn
from tests.unit.test_dashboard import load, metric_names, queries

pytestmark = pytest.mark.integration

EXPORTER_PORT = free_port()


def sample_names(exposition: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line and not line.startswith("#")}


def test_every_dashboard_metric_is_scraped(
    celery_stack: CeleryStack, clean_state: Any, fake_llm: FakeLLM, api: httpx.Client
) -> None:
    fake_llm.default = responder()
    env = {
        **PIPELINE_ENV,
        "ENGRAM_EXTRACTION_DEBOUNCE_SECONDS": "0",
        "ENGRAM_WORKER_METRICS_PORT": str(EXPORTER_PORT),
        # The cost panel needs priced models (the chat model and the extraction model of the fake).
        "ENGRAM_LLM_PRICES": json.dumps(
            {m: {"input": 3, "output": 15} for m in ("claude-sonnet-4-6", "claude-haiku-4-5")}
        ),
    }
    celery_stack.ensure("anthropic", **env)
    wanted = set().union(*(metric_names(expr) for expr in queries(load())))
    key = metrics_key(["metrics"])
    turn = post_turn(api, "dashboard", "I prefer green tea and I live in Lisbon").json()
    assert wait_turn(api, turn["turn_id"])["status"] == "done"

    def scraped() -> set[str]:
        auth = {"Authorization": f"Bearer {key}"}
        gateway = api.get("/metrics", headers=auth)
        pool = httpx.get(f"http://127.0.0.1:{EXPORTER_PORT}/metrics", headers=auth, timeout=10)
        assert gateway.status_code == 200 and pool.status_code == 200
        return sample_names(gateway.text) | sample_names(pool.text)

    missing: set[str] = set()

    def all_present() -> bool:
        nonlocal missing
        missing = wanted - scraped()
        return not missing

    # Extraction and embedding run after the turn: wait for their samples, then name whatever never came.
    try:
        eventually(all_present, timeout=60)
    except AssertionError:
        raise AssertionError(f"dashboard queries metrics no scrape has: {sorted(missing)}") from None
