#!/usr/bin/env bash
# Set up engram in ./.venv (first run only) and start the whole stack in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "up.sh: $*" >&2; }
if [ ! -x .venv/bin/engram ] || [ pyproject.toml -nt .venv/.installed ]; then
  if [ -x .venv/bin/engram ]; then
    say "pyproject.toml changed: updating engram's dependencies in .venv…"
  else
    say "installing engram and its dependencies into .venv (the first run takes a few minutes; later starts skip this)…"
  fi
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e .
  touch .venv/.installed
  say "installed; starting engram (the first start also creates the embedded database)…"
fi
exec .venv/bin/engram up "$@"
