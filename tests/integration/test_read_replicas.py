"""Read replicas: a streaming replica of the test Postgres (pg_basebackup from the embedded binaries) serves
the stale-tolerant reads; stopping it under load costs the callers nothing; a write's LSN buys
read-your-writes; and a replica that stopped replaying is read from no longer than the documented bound."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from api.metrics import EngramCollector
from shared.infra import replicas
from tests.conftest import _reset_process_state
from tests.support.replica import StreamingReplica
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

MAX_LAG = 3.0
REPLICA_ENV = {
    "ENGRAM_DATABASE_REPLICA_MAX_LAG_SECONDS": str(MAX_LAG),
    "ENGRAM_DATABASE_REPLICA_DOWN_SECONDS": "1",
    "ENGRAM_DATABASE_REPLICA_LSN_WAIT_SECONDS": "0.3",
}


@pytest.fixture
def replica(clean_state: TestServices) -> Iterator[StreamingReplica]:
    """A streaming replica of the test primary, and this process's gateway reading from it."""
    if clean_state.postgres is None:
        pytest.skip("needs the embedded Postgres (its binaries make the replica)")
    # A short path: the replica's socket lives in its data dir, and socket paths are limited to ~100 bytes.
    base = Path(tempfile.mkdtemp(prefix="engram-replica-"))
    base.chmod(0o755)  # the server runs as the `pgserver` user when tests run as root
    standby = StreamingReplica(clean_state.database_url, base / "pgdata").create().start()
    os.environ.update({**REPLICA_ENV, "ENGRAM_DATABASE_REPLICA_URLS": standby.url})
    _reset_process_state()
    try:
        yield standby
    finally:
        for name in (*REPLICA_ENV, "ENGRAM_DATABASE_REPLICA_URLS"):
            os.environ.pop(name, None)
        _reset_process_state()
        standby.stop()
        shutil.rmtree(base, ignore_errors=True)


def served(target: str, reason: str | None = None) -> int:
    return sum(n for (t, r), n in replicas.read_counts().items() if t == target and reason in (None, r))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; reads so far: {replicas.read_counts()}")
        time.sleep(0.05)


def remember(api: httpx.Client, value: str) -> str:
    response = api.post("/v1/users/alice/memories", json={"key": value.split()[-1].lower(), "value": value})
    assert response.status_code == 201, response.text
    lsn = response.headers.get("X-Engram-Write-Lsn")
    assert lsn and "/" in lsn
    return lsn


def listed(api: httpx.Client, **headers: str) -> set[str]:
    response = api.get("/v1/users/alice/memories", headers=headers)
    assert response.status_code == 200, response.text
    return {m["value"] for m in response.json()}


def test_reads_go_to_the_replica_and_read_your_writes_holds(api: httpx.Client, replica: StreamingReplica) -> None:
    lsn = remember(api, "Alice lives in Lisbon")
    # A read naming the write sees it whichever server answers it.
    assert listed(api, **{"X-Engram-Min-Lsn": lsn}) == {"Alice lives in Lisbon"}
    malformed = api.get("/v1/users/alice/memories", headers={"X-Engram-Min-Lsn": "yesterday"})
    assert malformed.status_code == 422
    assert malformed.json()["code"] == "validation_error" and "X-Engram-Min-Lsn" in malformed.text

    def a_replica_read() -> bool:
        before = served("replica")
        assert "Alice lives in Lisbon" in listed(api)
        return served("replica") > before

    wait_until(a_replica_read, "a list served by the replica")
    # Each read path named in the docs reaches the replica.
    for path, call in {
        "search": lambda: api.post("/v1/users/alice/memories/search", json={"query": "Where does Alice live?"}),
        "context": lambda: api.post("/v1/users/alice/context", json={"query": "home town"}),
        "export": lambda: api.get("/v1/users/alice/export"),
    }.items():
        before = served("replica")
        response = call()
        assert response.status_code == 200, response.text
        assert "Lisbon" in response.text
        assert served("replica") == before + 1, f"{path} did not read the replica: {replicas.read_counts()}"

    # The replica stops replaying: it still answers, but falls further behind with every write.
    with psycopg.connect(replica.url, autocommit=True) as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
    try:
        lsn = remember(api, "Alice works in Porto")
        written_at = time.monotonic()
        # Read-your-writes: the replica never replays the write, so the read waits a little, then the primary.
        behind = served("primary", "behind_write")
        assert listed(api, **{"X-Engram-Min-Lsn": lsn}) == {"Alice lives in Lisbon", "Alice works in Porto"}
        assert served("primary", "behind_write") == behind + 1

        # Without the header a read may miss the write, but only within the staleness bound: every read
        # that starts MAX_LAG seconds after the write was answered sees it.
        late_reads = 0
        while late_reads < 3:
            started = time.monotonic()
            values = listed(api)
            if started - written_at > MAX_LAG:
                assert "Alice works in Porto" in values, f"a read {started - written_at:.1f} s after the write"
                late_reads += 1
            time.sleep(0.1)
        assert served("primary", "no_fresh_replica") > 0
    finally:
        with psycopg.connect(replica.url, autocommit=True) as standby:
            standby.execute("SELECT pg_wal_replay_resume()")
    # Replaying again, the replica catches up and serves reads again.
    wait_until(a_replica_read, "the replica serving reads after it caught up")
    # The gateway's /metrics shows where reads went.
    families = {family.name: family for family in EngramCollector(sql_interval=60).collect()}
    samples = {(s.labels["target"], s.labels["reason"]): s.value for s in families["engram_db_reads"].samples}
    assert samples[("replica", "fresh")] >= 4 and samples[("primary", "behind_write")] >= 1


def test_a_replica_stopped_under_load_costs_callers_nothing(api: httpx.Client, replica: StreamingReplica) -> None:
    remember(api, "Alice lives in Lisbon")
    wait_until(lambda: "Alice lives in Lisbon" in listed(api) and served("replica") > 0, "a replica read")

    failures: list[str] = []
    answered = [0]
    stop = threading.Event()
    calls = [
        lambda client: client.get("/v1/users/alice/memories"),
        lambda client: client.post("/v1/users/alice/memories/search", json={"query": "Lisbon"}),
        lambda client: client.post("/v1/users/alice/context", json={"query": "home"}),
        lambda client: client.get("/v1/users/alice/export"),
    ]

    def load(offset: int) -> None:
        with httpx.Client(base_url=str(api.base_url), headers=dict(api.headers), timeout=60) as client:
            turn = offset
            while not stop.is_set():
                response = calls[turn % len(calls)](client)
                turn += 1
                if response.status_code != 200 or "Lisbon" not in response.text:
                    failures.append(f"{response.status_code}: {response.text[:200]}")
                answered[0] += 1

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        on_replica = served("replica")
        wait_until(lambda: served("replica") > on_replica + 8, "reads on the replica under load")
        replica.stop()
        fell_back = served("primary")
        after_stop = answered[0]
        wait_until(lambda: served("primary") > fell_back + 20, "reads on the primary with the replica gone")
        wait_until(lambda: answered[0] > after_stop + 20, "reads answered with the replica gone")
        # Back again: the replica serves reads once it has caught up.
        replica.start()
        on_replica = served("replica")
        wait_until(lambda: served("replica") > on_replica + 8, "reads on the restarted replica")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert failures == []
    assert served("primary", "replica_failed") + served("primary", "no_fresh_replica") > 0
