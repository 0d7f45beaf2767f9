"""`engram up` as a user runs it: embedded servers, every process, the demo, a clean stop,
data kept across restarts, and leftovers of a crashed run cleaned up."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from ops.embedded import free_port
from ops.supervisor import OWNER_ENV

pytestmark = pytest.mark.integration

ENGRAM = [sys.executable, "-m", "ops.cli"]


class UpProcess:
    def __init__(self, env: dict[str, str], *options: str) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [*ENGRAM, "up", *options],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.output.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"{pattern!r} not seen; output:\n{''.join(self.output)[-5000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def owned_processes(run_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(OWNER_ENV) == str(run_dir):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == "LISTEN" for c in psutil.net_connections("tcp"))


@pytest.fixture
def up_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        {
            "ENGRAM_DATA_DIR": str(tmp_path / "data"),
            "ENGRAM_PORT": str(free_port()),
            "ENGRAM_FLOWER_PORT": str(free_port()),
            "ENGRAM_TURN_WORKER_CONCURRENCY": "1",
            "ENGRAM_UP_WORKER_METRICS_PORT": "0",  # free ports: parallel runs must not collide on 9808
        }
    )
    yield env
    # Whatever a failed test left running must not outlive it.
    for proc in owned_processes(tmp_path / "data" / "run"):
        proc.kill()


def run_cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_up_runs_demo_stops_cleanly_keeps_data_and_cleans_up_after_a_crash(up_env: dict[str, str]) -> None:
    data_dir = Path(up_env["ENGRAM_DATA_DIR"])
    port, flower_port = int(up_env["ENGRAM_PORT"]), int(up_env["ENGRAM_FLOWER_PORT"])
    url = f"http://127.0.0.1:{port}"

    up = UpProcess(up_env)
    flower_password = up.wait_for(r"flower\s+http://127\.0\.0\.1:\d+\s+\(login engram / (\S+)\)").group(1)
    turns_metrics = up.wait_for(r"metrics\s+worker-turns\s+(http://\S+/metrics)").group(1)
    background_metrics = up.wait_for(r"metrics\s+worker-background\s+(http://\S+/metrics)").group(1)
    key = up.wait_for(r"API key\s+(egm_\S+)").group(1)
    up.wait_for(r"try: engram chat")
    assert (data_dir / "dev-api-key").read_text().strip() == key
    password_file = data_dir / "flower-password"
    assert password_file.read_text().strip() == flower_password and password_file.stat().st_mode & 0o777 == 0o600
    assert (data_dir / "secret-key").stat().st_mode & 0o777 == 0o600  # generated: encrypts channel secrets

    demo = run_cli(up_env, "demo", "--user", "demo-user")
    assert demo.returncode == 0, demo.stderr
    replies = [line for line in demo.stdout.splitlines() if line.startswith("engram> ")]
    assert len(replies) == 4
    assert all("offline mode (no language model)" in reply for reply in replies)
    assert "current_time" in demo.stdout  # the tool loop ran for "What time is it?"
    # Counted once extraction is done, every namespace: the name, the city, the preference and the name to use,
    # which the reply lists.
    assert "(4 memories stored for demo-user)" in demo.stdout, demo.stdout
    # The background pipeline extracted them all (", and call me Ali" is a clause of its own); recall lists them.
    assert "green tea" in replies[-1].lower() and "called ali" in replies[-1].lower(), replies[-1]
    assert "alice" in replies[-1].lower() and "lisbon" in replies[-1].lower(), replies[-1]

    # The processes' start-up chatter is in their log files under the data dir, which the banner names; the
    # terminal has the supervisor's lines and the banner only.
    logs = data_dir / "run" / "logs"
    assert f"logs      {logs}" in "".join(up.output)
    assert not any(noise in "".join(up.output) for noise in ("[tasks]", "Inspect method", "SecurityWarning")), up.output
    assert (
        "ready." in (logs / "worker-turns.log").read_text() and "Uvicorn running" in (logs / "gateway.log").read_text()
    )

    doctor = run_cli(up_env, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "pgvector: extension installed, version 0.8" in doctor.stdout
    assert "FAIL" not in doctor.stdout

    # Each worker process serves its pool's metrics: queue depth and the latency of the tasks it ran.
    metrics_key = run_cli(up_env, "keys", "create", "--scopes", "metrics").stdout.strip()
    assert httpx.get(turns_metrics, timeout=10).status_code == 401
    scrape = httpx.get(turns_metrics, headers={"Authorization": f"Bearer {metrics_key}"}, timeout=10).text
    assert re.search(r'^engram_queue_depth\{queue="turns"\} \d', scrape, re.M), scrape[-2000:]
    assert re.search(
        r'^engram_task_duration_seconds_count\{[^}]*task="engram\.turns\.drain"[^}]*\} [1-9]', scrape, re.M
    )
    background = httpx.get(background_metrics, headers={"Authorization": f"Bearer {metrics_key}"}, timeout=10).text
    assert re.search(r'^engram_task_duration_seconds_count\{[^}]*queue="extraction"[^}]*\} [1-9]', background, re.M)

    flower_url = f"http://127.0.0.1:{flower_port}"
    assert httpx.get(f"{flower_url}/healthcheck", timeout=10).status_code == 200
    # Flower's API runs and revokes tasks: without the login it refuses, with it it answers.
    assert httpx.get(f"{flower_url}/api/tasks", timeout=10).status_code == 401
    applied = httpx.post(f"{flower_url}/api/task/async-apply/engram.maintenance.redrive_stalled_turns", timeout=10)
    assert applied.status_code == 401
    wrong = httpx.get(f"{flower_url}/api/tasks", auth=("engram", "not-the-password"), timeout=10)
    assert wrong.status_code == 401
    assert httpx.get(f"{flower_url}/api/tasks", auth=("engram", flower_password), timeout=10).status_code == 200

    session_match = re.search(r"session (demo-\d+)", demo.stdout)
    assert session_match is not None
    session = session_match.group(1)
    before = httpx.get(
        f"{url}/v1/sessions/{session}/messages",
        params={"user_id": "demo-user"},
        headers={"Authorization": f"Bearer {key}"},
    ).json()["messages"]
    assert len(before) >= 8

    assert up.stop() == 0
    assert owned_processes(data_dir / "run") == []
    assert not listening(port) and not listening(flower_port)
    assert not (data_dir / "postgres" / "postmaster.pid").exists()

    # Start again: same key, same Flower login, same history.
    again = UpProcess(up_env)
    assert again.wait_for(r"\(login engram / (\S+)\)").group(1) == flower_password
    assert again.wait_for(r"API key\s+(egm_\S+)").group(1) == key
    again.wait_for(r"try: engram chat")
    after = httpx.get(
        f"{url}/v1/sessions/{session}/messages",
        params={"user_id": "demo-user"},
        headers={"Authorization": f"Bearer {key}"},
    ).json()["messages"]
    assert after == before

    # A crash (one start saved for the suite's time): the supervisor dies without cleaning up and its
    # children live on; the next start stops them and serves the same data.
    survivors = owned_processes(data_dir / "run")
    assert len(survivors) >= 5  # gateway, 2 workers (+ pool children), beat, flower
    again.proc.kill()
    again.proc.wait(10)
    assert any(p.is_running() for p in survivors)
    third = UpProcess(up_env)
    assert third.wait_for(r"API key\s+(egm_\S+)").group(1) == key
    third.wait_for(r"try: engram chat")
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in survivors)
    assert third.stop(signal.SIGINT) == 0
    assert owned_processes(data_dir / "run") == []


def test_doctor_explains_a_stopped_stack(up_env: dict[str, str]) -> None:
    doctor = run_cli(up_env, "doctor")
    assert doctor.returncode == 1
    assert "FAIL postgres" in doctor.stdout and "engram up" in doctor.stdout
