"""`engram reindex` with no database to talk to: a message and exit 1, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys


def test_reindex_without_a_reachable_database_says_so_and_exits_1() -> None:
    # Port 1 on loopback refuses at once: the command's first read (the recorded embedding space) fails.
    env = {**os.environ, "ENGRAM_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/engram"}
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", "reindex"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert "could not read the embedding space: database unavailable" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "DatabaseUnavailable:" not in done.stderr
