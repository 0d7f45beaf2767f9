"""ops/up.sh says what it is doing while it installs (the first run is silent for minutes otherwise), and
skips the install once it is done. Run against a stand-in Python so nothing is installed."""

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
  if [ "${*: -2}" = "-e ." ]; then
    printf '#!/usr/bin/env bash\\necho "engram ran: $*"\\n' > .venv/bin/engram
    chmod +x .venv/bin/engram
  fi
  exit 0
fi
exit 1
"""


def run_up(project: Path, python: Path) -> list[str]:
    done = subprocess.run(
        ["bash", str(project / "ops" / "up.sh"), "--flag"],
        env={**os.environ, "PYTHON": str(python)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_first_run_says_it_is_installing_before_it_does_and_later_runs_do_not(tmp_path: Path) -> None:
    project = tmp_path / "engram"
    (project / "ops").mkdir(parents=True)
    shutil.copy(ROOT / "ops" / "up.sh", project / "ops" / "up.sh")
    (project / "pyproject.toml").write_text("[project]\nname = 'engram'\n")
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)

    first = run_up(project, python)
    installing = next(i for i, line in enumerate(first) if "installing engram and its dependencies into .venv" in line)
    first_pip = next(i for i, line in enumerate(first) if line.startswith("pip ran"))
    assert installing < first_pip  # said before the long silent part, not after
    assert "first run takes a few minutes" in first[installing]
    assert first[-1] == "engram ran: up --flag"

    again = run_up(project, python)
    assert again == ["engram ran: up --flag"]  # installed: straight to the stack, nothing else said
