"""Shared fixtures: real Postgres + Redis, a real gateway over HTTP, real Celery workers, and the
fake LLM server that the official SDKs talk to."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from ops.embedded import free_port
from ops.fake_llm import FakeLLM
from tests.support.processes import CeleryProcess, beat, worker
from tests.support.services import TestServices, start_services

pytest_plugins = ["tests.support.ci", "tests.support.browser"]

# Short timers so recovery paths run within a test; production defaults are in shared/infra/config.py.
TEST_ENV = {
    "ENGRAM_SESSION_LOCK_TTL_SECONDS": "6",
    "ENGRAM_STALLED_TURN_SECONDS": "5",
    "ENGRAM_SWEEP_INTERVAL_SECONDS": "2",
    "ENGRAM_BROKER_VISIBILITY_TIMEOUT": "400",  # > 90 s time limit + the longest retry backoff (256 s)
    "ENGRAM_TURN_SOFT_TIME_LIMIT": "60",
    "ENGRAM_TURN_TIME_LIMIT": "90",
    "ENGRAM_LLM_MAX_ATTEMPTS": "2",
    "ENGRAM_LLM_MAX_RETRY_WAIT_SECONDS": "1",
    "ENGRAM_LLM_TIMEOUT_SECONDS": "30",
    "ENGRAM_MAX_TURN_CHARS": "2000",
    "ENGRAM_LLM_PROVIDER": "offline",
    # Tests empty the tables between cases; workers must not trust a space check from before that.
    "ENGRAM_EMBEDDING_SPACE_CHECK_SECONDS": "0",
    # Background extraction would call the scripted fake LLM at unpredictable moments; the pipeline
    # tests turn it on for their own workers.
    "ENGRAM_AUTO_MEMORY": "false",
    # Tests (the fuzzer above all) send far more requests per key than a client would; the rate-limit
    # tests turn the limiter on for themselves.
    "ENGRAM_RATE_LIMIT_KEY_PER_SECOND": "0",
    "ENGRAM_RATE_LIMIT_TENANT_PER_SECOND": "0",
    # Each test starts from empty tables: the gateway must not serve a previous test's cached aggregates.
    "ENGRAM_METRICS_SQL_INTERVAL_SECONDS": "0",
    # Maintenance job slices must end well inside the test time limit above.
    "ENGRAM_JOB_SLICE_SECONDS": "20",
}
# The shared beat must not fire a nightly job into some test's data when a run crosses 02:00-04:30 UTC;
# the maintenance tests start their own beat or run jobs explicitly. Only beat gets this: the gateway
# and workers keep the jobs enabled, so listing and running them behaves as configured.
BEAT_ENV = {
    f"ENGRAM_JOB_{job}_ENABLED": "false"
    for job in ("ENRICHMENT", "CONSOLIDATION", "DECAY", "REFLECTION", "CACHE_EVICTION")
}
_TABLES_KEPT = ("schema_migrations", "personality_presets")  # seeded by migrations


def _reset_process_state() -> None:
    from shared.infra import db
    from shared.infra.config import get_settings
    from shared.infra.redis_client import reset_redis
    from shared.infra.replicas import close_replicas
    from shared.runtime import turn_deps

    get_settings.cache_clear()
    turn_deps.cache_clear()
    db.close_pool()
    close_replicas()
    reset_redis()


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestServices]:
    workdir = tmp_path_factory.mktemp("services")
    svc = start_services(workdir)
    os.environ.update(TEST_ENV)
    os.environ["ENGRAM_DATABASE_URL"] = svc.database_url
    os.environ["ENGRAM_REDIS_URL"] = svc.redis_url
    os.environ["ENGRAM_DATA_DIR"] = str(workdir / "data")
    _reset_process_state()
    from shared.infra.db import connect
    from shared.infra.migrate import apply_migrations

    with connect() as conn:
        apply_migrations(conn)
    from shared.infra.config import get_settings
    from shared.infra.secretbox import keyring

    keyring(get_settings(), create=True)  # the data dir's secret key file, as `engram up` makes on first start
    yield svc
    _reset_process_state()
    svc.close()


# truncate_all: how long one attempt waits for a table lock, and for how long it keeps trying.
LOCK_WAIT_MS = 200
TRUNCATE_PATIENCE_S = 120.0


def truncate_all() -> None:
    from shared.infra import db

    # A worker may still be finishing the previous test's background work (draining a corpus's transcript units
    # takes seconds). Its transactions take tables in orders no TRUNCATE of every table can share (a unit batch
    # claims memory_chunks, then share-locks embedding_space), so an attempt waits at most LOCK_WAIT_MS for a lock
    # and gives way, rather than holding its locks until the deadlock detector picks it; it tries again until
    # the worker's transaction that held it has ended, as it does between batches or when the drain is done.
    # Ids are not restarted: a task a test left behind (a debounced extraction with an ETA, held in a worker's
    # memory where no purge reaches it) then names rows that are gone, instead of the next test's "session 1".
    deadline = time.monotonic() + TRUNCATE_PATIENCE_S
    while True:
        try:
            with db.connection() as conn:
                conn.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT_MS}ms'")
                tables = [
                    row["tablename"]
                    for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
                    if row["tablename"] not in _TABLES_KEPT
                ]
                conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
            break
        except db.DatabaseUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    from shared.embeddings.space import forget_checked_spaces
    from shared.memory.service import forget_recent_queries

    forget_checked_spaces()
    forget_recent_queries()


def clear_engram_keys() -> None:
    # Only engram's keys: Celery's queue bindings live in the same database and workers are running.
    from shared.infra.redis_client import get_redis

    client = get_redis()
    keys = list(client.scan_iter("engram:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def clean_state(services: TestServices) -> TestServices:
    truncate_all()
    clear_engram_keys()
    return services


@pytest.fixture
def conn(clean_state: TestServices) -> Iterator[Any]:
    """A pooled connection inside one transaction, on a clean database."""
    from shared.infra import db

    with db.connection() as connection:
        yield connection


@pytest.fixture
def autocommit_conn(clean_state: TestServices) -> Iterator[Any]:
    """A pooled connection in autocommit (each statement commits: what a job's many short transactions see)."""
    from shared.infra import db

    with db.connection() as connection:
        connection.autocommit = True
        yield connection
        connection.autocommit = False


@pytest.fixture
def fresh_db_url(services: TestServices) -> Iterator[str]:
    """A new empty database on the test Postgres (no migrations applied), dropped afterwards."""
    import uuid

    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"fresh_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(services.database_url, dbname=name)
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def fake_llm(fake_llm_server: FakeLLM) -> Iterator[FakeLLM]:
    """The session's fake model, reset before and after the test: a default reply or a script a test set must
    not answer the next test's calls (a test that only uses the stack reaches this server too)."""
    fake_llm_server.reset()
    yield fake_llm_server
    fake_llm_server.reset()


class Gateway:
    def __init__(self) -> None:
        from ops.gateway import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Gateway:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("gateway did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def gateway(services: TestServices) -> Iterator[Gateway]:
    gw = Gateway().start()
    yield gw
    gw.stop()


def make_key(tenant: str) -> str:
    from shared.access.auth import create_key
    from shared.infra import db

    with db.connection() as conn:
        return create_key(conn, tenant, "test")


@pytest.fixture
def api_key(clean_state: TestServices) -> str:
    return make_key("tenant-a")


@pytest.fixture
def api(gateway: Gateway, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as client:
        yield client


@pytest.fixture
def unfreeze_after() -> Iterator[None]:
    """For tests that freeze this process's heap (shared/infra/heap.py): the rest of the run collects as before."""
    yield
    gc.unfreeze()


class CeleryStack:
    """Worker (and optionally beat) processes configured for one LLM provider at a time."""

    def __init__(self, services: TestServices, fake: FakeLLM, log_dir: Path) -> None:
        self.services = services
        self.fake = fake
        self.log_dir = log_dir
        self.provider: str | None = None
        self.overrides: dict[str, str] = {}
        self.worker: CeleryProcess | None = None
        self.beat: CeleryProcess | None = None
        self._serial = 0

    def env(self, provider: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_LLM")}
        env.update(TEST_ENV)
        env.update(
            {
                "ENGRAM_DATABASE_URL": self.services.database_url,
                "ENGRAM_REDIS_URL": self.services.redis_url,
                "ENGRAM_DATA_DIR": os.environ["ENGRAM_DATA_DIR"],
                "ENGRAM_LLM_PROVIDER": provider,
                "ENGRAM_ANTHROPIC_API_KEY": "test-key",
                "ENGRAM_ANTHROPIC_BASE_URL": self.fake.anthropic_base_url,
                "ENGRAM_OPENAI_API_KEY": "test-key",
                "ENGRAM_OPENAI_BASE_URL": self.fake.openai_base_url,
            }
        )
        env.update(overrides if overrides is not None else self.overrides)
        return env

    def ensure(self, provider: str = "anthropic", **overrides: str) -> CeleryProcess:
        """A running worker for this provider and these extra ENGRAM_* settings (restarted if they differ)."""
        if self.worker is not None and self.worker.proc is not None and self.worker.proc.poll() is None:
            if self.provider == provider and self.overrides == overrides:
                return self.worker
            self.worker.stop()
        return self.start_worker(provider, overrides=overrides)

    def start_worker(
        self, provider: str = "anthropic", concurrency: int = 2, overrides: dict[str, str] | None = None
    ) -> CeleryProcess:
        self._serial += 1
        self.provider = provider
        if overrides is not None:
            self.overrides = overrides
        self.worker = worker(f"w{self._serial}", self.env(provider), self.log_dir, concurrency).start()
        self.worker.wait_ready()
        return self.worker

    def start_beat(self) -> CeleryProcess:
        if self.beat is None or self.beat.proc is None:
            self.beat = beat({**self.env(self.provider or "anthropic"), **BEAT_ENV}, self.log_dir).start()
            self.beat.wait_ready("beat: Starting...")
        return self.beat

    def stop(self) -> None:
        for proc in (self.worker, self.beat):
            if proc is not None:
                proc.stop()


@pytest.fixture(scope="session")
def celery_stack(
    services: TestServices, fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryStack]:
    stack = CeleryStack(services, fake_llm_server, tmp_path_factory.mktemp("celery"))
    yield stack
    stack.stop()


@pytest.fixture
def no_shared_workers(celery_stack: CeleryStack) -> None:
    """No worker or beat of the shared stack runs: a test that writes rows straight to the database and runs a
    job by hand owns them. A beat an earlier test started keeps sweeping (unmined messages older than the
    debounce get an extraction), and its worker would mine the test's messages before the job it runs."""
    celery_stack.stop()


@pytest.fixture
def workers(celery_stack: CeleryStack, clean_state: TestServices) -> CeleryStack:
    celery_stack.ensure("anthropic")
    return celery_stack


def wait_turn(api: httpx.Client, turn_id: int, timeout: float = 60) -> dict[str, Any]:
    """Long-poll a turn until it is done or failed."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        response = api.get(f"/v1/turns/{turn_id}", params={"wait": max(0.1, min(remaining, 10))})
        if response.status_code == 503 and remaining > 0:  # a dependency is recovering: retry, as a client would
            time.sleep(0.5)
            continue
        body: dict[str, Any] = response.json()
        if body["status"] in ("done", "failed") or remaining <= 0:
            return body


@pytest.fixture
def placeholder_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For a test that imports workers.app without a broker: the module builds its Celery app from the settings at
    import and only names its broker, so a placeholder address does. The workers modules imported here are
    forgotten after the test: a later test in this process (a gateway sending a turn's drain) builds the app
    again from its own settings instead of sending to the placeholder."""
    from shared.infra.config import get_settings

    imported_before = "workers.app" in sys.modules
    if "ENGRAM_REDIS_URL" not in os.environ:
        monkeypatch.setenv("ENGRAM_REDIS_URL", "redis://127.0.0.1:1/0")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()
    if not imported_before:
        forget_workers_modules()


def forget_workers_modules() -> None:
    """The next `from workers import ...` in this process builds the Celery app again, from the settings then."""
    for name in [name for name in sys.modules if name == "workers" or name.startswith("workers.")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def celery_app_on_the_test_broker(request: pytest.FixtureRequest) -> None:
    """Every test with the services publishes to their Redis. The in-process gateway sends through the Celery app
    this process built first, from the settings of that moment: one built before the services (a module importing
    workers.app without them, a developer's `engram up` named by the data dir) sends every drain elsewhere, the
    gateway logs "broker unavailable" and answers 202, and no turn of any later test runs. That app is forgotten
    here, and the next publish builds one for the test broker."""
    if "services" not in request.fixturenames:
        return
    module = sys.modules.get("workers.app")
    if module is not None and module.app.conf.broker_url != os.environ.get("ENGRAM_REDIS_URL"):
        forget_workers_modules()
