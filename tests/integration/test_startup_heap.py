"""The gateway and the workers freeze the heap they built at startup (shared/infra/heap.py says why)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from shared.infra import db
from tests.conftest import CeleryStack
from tests.support.heap import walked_by_collections


def test_gateway_freezes_its_startup_heap_before_it_serves(
    services: object, monkeypatch: pytest.MonkeyPatch, unfreeze_after: None
) -> None:
    from ops.gateway import create_app

    monkeypatch.setattr(db, "close_pool", lambda: None)  # the lifespan's shutdown; other tests keep the pool
    app = create_app()
    assert walked_by_collections(app)
    with TestClient(app) as client:
        # Built before the start: no full collection walks it while requests are served (one walking a
        # started gateway's heap took about 120 ms, with every request waiting).
        assert not walked_by_collections(app)
        assert client.get("/healthz").status_code == 200


def test_a_worker_freezes_its_startup_heap_before_its_pool_forks(workers: CeleryStack) -> None:
    assert workers.worker is not None
    log = workers.worker.log_path.read_text(errors="replace")
    frozen = re.search(r"startup heap frozen\W.*objects=(\d+)", log)
    assert frozen is not None, workers.worker.tail()
    # The imports and settings of a worker: hundreds of thousands of objects, not a handful.
    assert int(frozen.group(1)) > 100_000
    # Before the pool's children exist, so they inherit it frozen (their ready line comes after).
    assert log.index("startup heap frozen") < log.index("ready.")
