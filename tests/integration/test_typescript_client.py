"""The TypeScript client (clients/typescript) against the real gateway: its node tests (`node --test`, no
npm install: the client has no runtime dependencies) run with this gateway's URL and a key."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Gateway

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NODE_MAJOR = 18  # global fetch and node:test


def node() -> str:
    """Node.js, which these tests need (ops/test.sh installs it as root when it is missing): missing is a
    failure that says so, never a skip."""
    found = shutil.which("node")
    if found is None:
        pytest.fail(f"node (>= {NODE_MAJOR}) is needed to test the TypeScript client: apt-get install nodejs")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < NODE_MAJOR:
        pytest.fail(f"node {version.strip()} is too old for the TypeScript client's tests: {NODE_MAJOR} or later")
    return found


def test_the_typescript_client_passes_its_node_tests_against_the_gateway(gateway: Gateway, api_key: str) -> None:
    env = {**os.environ, "ENGRAM_URL": gateway.url, "ENGRAM_API_KEY": api_key}
    done = subprocess.run(
        [node(), "--test", "test/client.test.js"],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # node's summary: every test passed and there were some.
    assert re.search(r"^# pass [1-9]", done.stdout, re.M) and re.search(r"^# fail 0$", done.stdout, re.M), done.stdout
