"""ops/up.sh says what it is doing while it installs (the first run is silent for minutes otherwise), keeps
pip's output (setuptools' editable-install warning block included) in .venv/install.log instead of the
terminal, and skips the install once it is done. Run against a stand-in Python so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Stands in for python3: `-m venv DIR` makes DIR/bin/python (itself), `-m pip install -e .` makes an
# `engram` that reports how it was called.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1 $2" = "-m pip" ]; then
  echo "pip ran: ${*:3}"
  echo "Collecting torch==2.13.0"
  echo "  BuildBackendWarning: Editable installation." >&2
  if [ -n "${FAIL_PIP:-}" ]; then echo "ERROR: no matching distribution"; exit 1; fi
  if [ "${*: -2}" = "-e ." ]; then
    printf '#!/usr/bin/env bash\\necho "engram ran: $*"\\n' > .venv/bin/engram
    chmod +x .venv/bin/engram
  fi
  exit 0
fi
exit 1
"""


def run_up(project: Path, python: Path, check: bool = True, **env: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(project / "ops" / "up.sh"), "--flag"],
        env={**os.environ, "PYTHON": str(python), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=check,
    )
    return done.stdout.splitlines()


def make_project(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "engram"
    (project / "ops").mkdir(parents=True)
    for script in ("up.sh", "pip_progress.sh"):
        shutil.copy(ROOT / "ops" / script, project / "ops" / script)
    (project / "pyproject.toml").write_text("[project]\nname = 'engram'\n")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return project, python


def test_first_run_says_it_is_installing_and_keeps_pips_output_in_a_log_and_later_runs_do_not(tmp_path: Path) -> None:
    project, python = make_project(tmp_path)

    first = run_up(project, python)
    assert "installing engram and its dependencies into .venv" in first[0]  # said before the long part
    assert "a few minutes" in first[0] and ".venv/install.log" in first[0]
    # pip's chatter and setuptools' warnings are in the log, not on the terminal.
    assert not any("pip ran" in line or "BuildBackendWarning" in line for line in first), first
    log = (project / ".venv" / "install.log").read_text()
    assert "pip ran: install -e ./clients/python -e ." in log and "BuildBackendWarning" in log
    assert first[-1] == "engram ran: up --flag"

    again = run_up(project, python)
    assert again == ["engram ran: up --flag"]  # installed: straight to the stack, nothing else said


def test_a_failed_install_shows_the_end_of_pips_output(tmp_path: Path) -> None:
    project, python = make_project(tmp_path)
    failed = run_up(project, python, check=False, FAIL_PIP="1")
    assert any("pip failed (exit 1)" in line for line in failed), failed
    assert "ERROR: no matching distribution" in failed
    assert any(".venv/install.log" in line for line in failed)
    assert not any(line.startswith("engram ran") for line in failed)
