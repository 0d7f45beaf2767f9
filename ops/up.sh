#!/usr/bin/env bash
# Set up engram in ./.venv (first run only) and start the whole stack in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/engram ] || [ pyproject.toml -nt .venv/.installed ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e .
  touch .venv/.installed
fi
exec .venv/bin/engram up "$@"
