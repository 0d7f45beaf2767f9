"""Worker liveness: a worker's heartbeat appears in Redis once it is ready, comes back after the key is deleted
(as the tests' key cleanup does), and is gone as soon as the worker stops; the reader skips damaged values and
names the queues no live worker consumes; a Redis error costs a beat, never the heartbeat thread."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ops.embedded import free_port
from shared.infra.redis_client import get_redis, new_redis
from shared.infra.worker_heartbeats import KEY_PREFIX, WorkerBeat, key, live_workers, record, unserved_queues
from tests.conftest import CeleryStack
from tests.integration.test_pipeline import eventually
from tests.support.processes import CeleryProcess, worker
from workers.heartbeat import Heartbeat

pytestmark = pytest.mark.integration

# A queue of its own: this worker takes no task from the shared worker's queues.
QUEUE = "heartbeat-test"
# Long enough that its key (three intervals) outlives a warm shutdown: gone at once means removed, not expired.
INTERVAL_S = "2"


def _beat_of(name: str) -> WorkerBeat | None:
    return next((b for b in live_workers(get_redis()) if b.hostname.startswith(f"{name}@")), None)


def _hostnames(client: redis.Redis) -> list[str]:
    """This module's workers only: a session worker other tests started may be beating too."""
    return [b.hostname for b in live_workers(client) if b.hostname.endswith("@heartbeat-test")]


@pytest.fixture
def beating(
    celery_stack: CeleryStack, clean_state: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryProcess]:
    env = celery_stack.env("offline", {"ENGRAM_WORKER_HEARTBEAT_SECONDS": INTERVAL_S})
    proc = worker("beating", env, tmp_path_factory.mktemp("beating"), concurrency=1, queues=(QUEUE,)).start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def test_a_ready_worker_beats_until_it_stops(beating: CeleryProcess) -> None:
    eventually(lambda: _beat_of("beating") is not None, timeout=20, message="no heartbeat after ready")
    beat = _beat_of("beating")
    assert beat is not None
    assert beat.queues == (QUEUE,)
    assert beat.pid == (beating.proc.pid if beating.proc else None)  # the main process, not a pool child
    assert beat.started_at <= beat.last_seen

    # Deleted (as the tests' cleanup deletes engram:* keys): written again on the next interval.
    get_redis().delete(key(beat.hostname))
    eventually(lambda: _beat_of("beating") is not None, timeout=20, message="heartbeat not re-written")
    first_seen = _beat_of("beating")
    assert first_seen is not None
    eventually(
        lambda: (b := _beat_of("beating")) is not None and b.last_seen > first_seen.last_seen,
        timeout=20,
        message="heartbeat not refreshed",
    )

    beating.stop()  # returns once the process has exited: its shutdown removed the key
    assert _beat_of("beating") is None


def test_live_workers_reads_beats_expires_them_and_skips_damaged_values(clean_state: Any) -> None:
    client = get_redis()
    record(client, WorkerBeat("a@heartbeat-test", 11, ("turns", "channels"), 1.0, 2.0), interval_seconds=0.1)
    record(client, WorkerBeat("b@heartbeat-test", 12, ("embeddings",), 1.0, 2.0), interval_seconds=60)
    client.set(f"{KEY_PREFIX}broken@heartbeat-test", "not json")
    client.set(f"{KEY_PREFIX}other@heartbeat-test", json.dumps({"hostname": "other@heartbeat-test"}))
    # a@heartbeat-test's key lives three intervals (0.3 s): wait for it to expire.
    eventually(lambda: _hostnames(client) == ["b@heartbeat-test"], timeout=10, message="no expiry")
    beats = [b for b in live_workers(client) if b.hostname == "b@heartbeat-test"]
    assert unserved_queues(beats, ("turns", "embeddings")) == ["turns"]


def test_a_redis_error_skips_a_beat_and_the_next_interval_writes_it(clean_state: Any) -> None:
    """Redis unreachable at first: the thread logs, lives on, and writes the beat once Redis answers."""
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    live = new_redis()
    calls = 0

    def client() -> redis.Redis:
        nonlocal calls
        calls += 1
        return dead if calls <= 2 else live

    heartbeat = Heartbeat("flaky@heartbeat-test", ("turns",), interval_seconds=0.2, client=client)
    heartbeat.start()
    try:
        eventually(
            lambda: "flaky@heartbeat-test" in _hostnames(get_redis()),
            timeout=10,
            message="no heartbeat after Redis came back",
        )
        assert calls > 2
    finally:
        heartbeat.stop()
    assert "flaky@heartbeat-test" not in _hostnames(get_redis())
