"""ops/process_commands.py: every process's command line; `engram worker POOL` with its autoscale bounds."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from ops.cli import app
from ops.process_commands import (
    UnknownPool,
    beat_argv,
    flower_argv,
    flower_env,
    gateway_argv,
    pool_argv,
    worker_argv,
)
from shared.infra.config import Settings
from shared.queueing.queues import INTERACTIVE_QUEUES, POOLS, QUEUES


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize("pool", list(POOLS))
def test_each_pool_consumes_its_queues_with_its_autoscale_bounds(pool: str) -> None:
    bounds = {f"pool_{pool}_min_processes": 3, f"pool_{pool}_max_processes": 7}
    argv = pool_argv(settings(**bounds, log_level="WARNING"), pool, "/py")
    assert argv[:6] == ["/py", "-m", "celery", "-A", "workers.app", "worker"]
    assert argv[argv.index("-Q") + 1].split(",") == list(POOLS[pool])
    assert argv[argv.index("-n") + 1] == f"{pool}@%h"
    assert "--autoscale=7,3" in argv  # Celery's order: max,min
    assert not {"-c", "--concurrency"} & set(argv)  # the autoscaler sets the process count
    assert {"--without-mingle", "--without-gossip"} <= set(argv)
    assert argv[argv.index("--loglevel") + 1] == "WARNING"


def test_a_worker_has_a_fixed_pool_or_autoscale_bounds_not_both() -> None:
    argv = worker_argv(INTERACTIVE_QUEUES, "worker-turns", concurrency=3, log_level="INFO", python="/py")
    assert argv == [
        *("/py", "-m", "celery", "-A", "workers.app", "worker", "-Q", ",".join(INTERACTIVE_QUEUES)),
        *("-n", "worker-turns@%h", "-c", "3", "--loglevel", "INFO", "--without-mingle", "--without-gossip"),
    ]
    for size in ({}, {"concurrency": 2, "autoscale": (1, 2)}):
        with pytest.raises(ValueError, match="either concurrency or autoscale"):
            worker_argv(QUEUES, "w", log_level="INFO", **size)  # type: ignore[arg-type]


def test_the_gateway_runs_the_app_factory_under_uvicorn() -> None:
    assert gateway_argv("127.0.0.1", 8000, python="/py") == [
        *("/py", "-m", "uvicorn", "ops.gateway:create_app", "--factory"),
        *("--host", "127.0.0.1", "--port", "8000", "--no-access-log", "--timeout-keep-alive", "75"),
    ]
    assert gateway_argv("0.0.0.0", 1, log_level="warning")[-2:] == ["--log-level", "warning"]


def test_beat_runs_redbeat_and_flower_logs_in_from_the_environment() -> None:
    assert beat_argv("INFO", python="/py") == [
        *("/py", "-m", "celery", "-A", "workers.app", "beat", "-S", "workers.beat:Scheduler", "--loglevel", "INFO")
    ]
    flower = flower_argv("127.0.0.1", 5555, python="/py")
    assert flower == ["/py", "-m", "celery", "-A", "workers.app", "flower", "--address=127.0.0.1", "--port=5555"]
    assert flower_argv("0.0.0.0", 5555, db="/f.db")[-2:] == ["--persistent=True", "--db=/f.db"]
    assert flower_env("engram", "pw") == {"FLOWER_BASIC_AUTH": "engram:pw", "FLOWER_UNAUTHENTICATED_API": "false"}


def test_the_pools_cover_every_queue_once() -> None:
    consumed = [queue for pool in POOLS for queue in POOLS[pool]]
    assert sorted(consumed) == sorted(QUEUES)


def test_default_bounds_give_turns_room_to_grow() -> None:
    low, high = settings().pool_processes("turns")
    assert 1 <= low < high


def test_a_maximum_below_the_minimum_is_refused_with_the_setting_names() -> None:
    with pytest.raises(ValidationError, match="ENGRAM_POOL_MEMORY_MAX_PROCESSES \\(1\\) is below"):
        settings(pool_memory_min_processes=2, pool_memory_max_processes=1)


def test_an_unknown_pool_is_a_clear_error() -> None:
    with pytest.raises(UnknownPool, match="unknown pool 'gpu'; pools: turns, memory, embeddings, maintenance"):
        pool_argv(settings(), "gpu")
    result = CliRunner().invoke(app, ["worker", "gpu"])
    assert result.exit_code == 1
    assert "unknown pool 'gpu'" in result.output


def test_engram_up_refuses_a_taken_metrics_port_naming_the_setting(tmp_path: Path) -> None:
    from ops.stack import Stack, StackError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = Stack(settings(data_dir=tmp_path, up_worker_metrics_port=port - 1), cluster=True)
        with pytest.raises(
            StackError, match=r"worker metrics port 127\.0\.0\.1:\d+ is not available.*ENGRAM_UP_WORKER_METRICS_PORT"
        ):
            stack._metrics_ports(4)


def test_engram_up_takes_any_free_metrics_ports_for_zero(tmp_path: Path) -> None:
    from ops.stack import Stack

    ports = Stack(settings(data_dir=tmp_path, up_worker_metrics_port=0), cluster=True)._metrics_ports(4)
    assert len(set(ports)) == 4 and all(port > 0 for port in ports)
