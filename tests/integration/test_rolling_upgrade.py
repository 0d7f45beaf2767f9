"""A rolling upgrade: the database is migrated to this release's head while workers of the previous release
still run. The previous release's source (tests/support/previous_release.py: the main line before the newest
migration landed, exported with `git archive`) runs its own `engram worker` pools against the new schema, and
turns sent through this release's gateway complete exactly once, with the memories they store embedded."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis

from ops.embedded import free_port
from ops.fake_llm import FakeLLM, FakeReply
from shared.access.auth import create_key
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations, available_migrations
from tests.conftest import CeleryStack, wait_turn
from tests.support.previous_release import HistoryMissing, PreviousRelease, export_previous_release
from tests.support.processes import CeleryProcess, gateway, wait_http
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

TURNS = 4
# A Redis database of its own: the session's workers (this release's code) must not take these turns.
REDIS_DB = 7
STARTUP_SECONDS = 240


@pytest.fixture
def previous_release(tmp_path: Path) -> PreviousRelease:
    try:
        return export_previous_release(tmp_path / "previous")
    except HistoryMissing as exc:
        # Not a skip: without the previous release there is nothing to test, and passing would say otherwise.
        pytest.fail(f"the previous release's source is needed for this test: {exc}")


@pytest.fixture
def own_redis(services: TestServices) -> Iterator[str]:
    parts = urlsplit(services.redis_url)
    url = urlunsplit(parts._replace(path=f"/{REDIS_DB}"))
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def _run_previous(release: PreviousRelease, env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=release.tree, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_worker_of_the_previous_release_runs_turns_on_the_new_schema(
    previous_release: PreviousRelease,
    fresh_db_url: str,
    own_redis: str,
    celery_stack: CeleryStack,
    fake_llm: FakeLLM,
    tmp_path: Path,
) -> None:
    with connect(fresh_db_url) as conn:
        apply_migrations(conn)  # this release's head, the previous release's newest migration and one more
        versions = [r["version"] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in available_migrations()]

    env = celery_stack.env(
        "anthropic",
        {
            "ENGRAM_DATABASE_URL": fresh_db_url,
            "ENGRAM_REDIS_URL": own_redis,
            "ENGRAM_POOL_TURNS_MIN_PROCESSES": "1",
            "ENGRAM_POOL_TURNS_MAX_PROCESSES": "2",
            "ENGRAM_POOL_EMBEDDINGS_MAX_PROCESSES": "1",
        },
    )
    # Unbuffered: their logs are read while they run.
    previous_env = {**env, "PYTHONPATH": str(previous_release.tree), "PYTHONUNBUFFERED": "1"}
    # The previous release's code is what its processes import (`python -m` puts their working directory first).
    imported = _run_previous(previous_release, previous_env, "-c", "import shared; print(shared.__file__)")
    assert Path(imported).is_relative_to(previous_release.tree), imported

    logs = tmp_path / "logs"
    logs.mkdir()
    old_workers = [
        CeleryProcess(
            f"previous-{pool}",
            [sys.executable, "-m", "ops.cli", "worker", pool],
            previous_env,
            logs,
            cwd=previous_release.tree,
        )
        for pool in ("turns", "embeddings")
    ]
    port = free_port()
    new_gateway = gateway(env, logs, port)
    try:
        for process in (new_gateway, *old_workers):
            process.start()
        base = f"http://127.0.0.1:{port}"
        # Generous: on a loaded machine three processes importing at once take long to start.
        wait_http(new_gateway, f"{base}/healthz", timeout=STARTUP_SECONDS)
        for process in old_workers:
            process.wait_ready(timeout=STARTUP_SECONDS)
        with connect(fresh_db_url) as conn:
            key = create_key(conn, "acme", "deploy")
        _exercise(base, key, fake_llm, fresh_db_url)
        # Read before stopping them: what a warm shutdown logs is not the previous release failing on the schema.
        worker_logs = "".join(process.tail(200_000) for process in old_workers)
        assert "Traceback" not in worker_logs, worker_logs[-4000:]
    finally:
        for process in (new_gateway, *old_workers):
            process.stop()


def _exercise(base: str, key: str, fake_llm: FakeLLM, database_url: str) -> None:
    for i in range(TURNS):
        fake_llm.script(
            FakeReply(tool_calls=[("memory_store", {"key": f"deploy-fact-{i}", "value": f"rolled out release {i}"})]),
            FakeReply(text=f"Noted, release {i}."),
            match=f"remember release {i}",
        )
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        accepted = [
            api.post(f"/v1/sessions/deploy-{i}/turns", json={"user_id": "ops", "text": f"remember release {i}"})
            for i in range(TURNS)
        ]
        assert [a.status_code for a in accepted] == [202] * TURNS, [a.text for a in accepted]
        turns = [wait_turn(api, a.json()["turn_id"]) for a in accepted]
        assert [(t["status"], t["reply"]) for t in turns] == [("done", f"Noted, release {i}.") for i in range(TURNS)]
        for i in range(TURNS):
            history = api.get(f"/v1/sessions/deploy-{i}/messages", params={"user_id": "ops"}).json()["messages"]
            assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]  # each step once
        found = api.post("/v1/users/ops/memories/search", json={"query": "rolled out release 2"}).json()["results"]
        assert any(r["key"] == "deploy-fact-2" for r in found)
    with connect(database_url) as conn:
        attempts = conn.execute("SELECT attempts FROM turns ORDER BY id").fetchall()
        assert [r["attempts"] for r in attempts] == [1] * TURNS  # each turn ran once
        stored = conn.execute(
            "SELECT key, count(*) AS n FROM memories WHERE valid_until IS NULL GROUP BY key ORDER BY key"
        ).fetchall()
        assert [(r["key"], r["n"]) for r in stored] == [(f"deploy-fact-{i}", 1) for i in range(TURNS)]
        calls = conn.execute("SELECT count(*) AS n FROM llm_calls WHERE purpose = 'chat'").fetchone()
        assert calls == {"n": 2 * TURNS}
    # The previous release's embeddings pool stores the memories' vectors in the new schema.
    deadline = time.monotonic() + 60
    while True:
        with connect(database_url) as conn:
            pending = conn.execute(
                "SELECT count(*) AS n FROM memories WHERE embedded_at IS NULL AND valid_until IS NULL"
            ).fetchone()
        if pending == {"n": 0}:
            break
        assert time.monotonic() < deadline, f"{pending} memories still wait for their vectors"
        time.sleep(0.2)
