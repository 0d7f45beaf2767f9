#!/usr/bin/env bash
# Set up a test virtualenv in ./.venv-test and run lint, type checks, the docs build and the whole test suite
# against real Postgres+pgvector, Redis and Celery workers (embedded servers unless
# ENGRAM_TEST_DATABASE_URL / ENGRAM_TEST_REDIS_URL are set). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "test.sh: $*" >&2; }
# shellcheck source=ops/pip_progress.sh
. ops/pip_progress.sh
if [ ! -x .venv-test/bin/pytest ] || [ pyproject.toml -nt .venv-test/.installed ] \
  || [ clients/python/pyproject.toml -nt .venv-test/.installed ]; then
  say "installing engram and its test dependencies into .venv-test: a few minutes the first time;" \
    "later runs skip this. pip's output: .venv-test/install.log"
  "$PYTHON" -m venv .venv-test
  : >.venv-test/install.log
  pip_with_progress .venv-test/install.log .venv-test/bin/python -m pip install --upgrade pip
  # The Python client is its own distribution (clients/python); `engram import` and the tests use it.
  pip_with_progress .venv-test/install.log .venv-test/bin/python -m pip install -e ./clients/python -e ".[test]"
  touch .venv-test/.installed
  say "installed"
fi
# System packages some tests drive, never downloaded by the tests themselves: Node.js (the TypeScript client's
# tests, tests/integration/test_typescript_client.py) and Debian's chromium with its chromedriver (the console's
# browser tests, tests/integration/test_console.py). Installed here when missing.
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    say "installing ${missing[*]} with apt-get (browser and TypeScript client tests); log: .venv-test/apt.log"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; } \
      >.venv-test/apt.log 2>&1 || { say "apt-get failed: see .venv-test/apt.log"; exit 1; }
  elif command -v apt-get >/dev/null; then
    say "the tests need ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}' (or run this script as root)," \
      "then again"
    exit 1
  else
    say "the tests need Node.js, /usr/bin/chromium and /usr/bin/chromedriver (Debian's nodejs, chromium and" \
      "chromium-driver packages); this machine has no apt-get: install them, then run this script again"
    exit 1
  fi
fi
say "ruff, then mypy, then pytest"
.venv-test/bin/ruff check .
.venv-test/bin/mypy
# The import contracts ([tool.importlinter] in pyproject.toml): dependencies point one way, no cycles.
.venv-test/bin/lint-imports --no-cache
# pytest keeps only the newest three temp directories under one root per user, so concurrent runs
# on one machine delete each other's (servers' data directories included): each run gets its own.
TEMP_ROOT="$(mktemp -d -t engram-tests-XXXXXX)"
trap 'rm -rf "$TEMP_ROOT"' EXIT
# The docs site (mkdocs.yml): --strict turns a broken link or anchor into a failure. Built outside the
# tree so nothing is left behind; the notice about MkDocs 2 is not ours to act on.
NO_MKDOCS_2_WARNING=1 .venv-test/bin/mkdocs build --strict --quiet --site-dir "$TEMP_ROOT/site"
# Two pytest processes (pytest-xdist), each given whole test files and starting its own embedded servers, so one
# test's waits overlap another's work. Servers of your own (ENGRAM_TEST_*_URL) are one database and one Redis for
# every process: the tests then run in one. `-n 0` among the arguments also runs them in one.
parallel=(-n 2 --dist loadfile)
if [ -n "${ENGRAM_TEST_DATABASE_URL:-}${ENGRAM_TEST_REDIS_URL:-}" ]; then parallel=(); fi
PYTEST_DEBUG_TEMPROOT="$TEMP_ROOT" .venv-test/bin/pytest "${parallel[@]}" "$@"
