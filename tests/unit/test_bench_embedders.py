"""ops/bench/embedders.py refuses bad input with a message and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.bench.embedders", *args], capture_output=True, text=True, check=False
    )


def test_missing_file_is_a_message(tmp_path: Path) -> None:
    done = _run("--file", str(tmp_path / "nope.json"))
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot read") and "Traceback" not in done.stderr


def test_not_locomo_is_a_message(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"not": "a list"}')
    done = _run("--file", str(path))
    assert done.returncode == 1
    assert "expected a JSON list of conversations" in done.stderr and "Traceback" not in done.stderr


def test_unknown_backend_is_a_message(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[]")
    done = _run("--file", str(path), "--backends", "tensorflow")
    assert done.returncode == 1
    assert "unknown backend" in done.stderr and "Traceback" not in done.stderr
