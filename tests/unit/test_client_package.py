"""clients/python installs on its own: `pip install ./clients/python` in a fresh virtualenv (dependencies
resolved as a user's pip resolves them) gives a client that imports and builds its requests, with none of the
server's dependencies (psycopg, fastapi, celery) installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, json
import engramhq_client
from engramhq_client import EngramClient, core
client = EngramClient("http://127.0.0.1:1", "egm_test")
call = core.context("alice", query="tea", max_tokens=100)
print(json.dumps({
    "client": engramhq_client.__file__,
    "call": [call.method, call.path, call.json],
    "server_packages": {name: importlib.util.find_spec(name) is not None
                        for name in ("psycopg", "fastapi", "celery", "api", "shared", "ops")},
}))
"""


def test_the_client_installs_into_a_fresh_virtualenv_without_the_servers_dependencies(tmp_path: Path) -> None:
    # A copy: pip builds a local directory in place, and the build must leave nothing in the repository.
    source = shutil.copytree(
        ROOT / "clients" / "python", tmp_path / "client", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    # Nothing of this checkout or of the test environment may be importable in the new virtualenv.
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = tmp_path / "venv"
    # Without a pip of its own (bootstrapping one is most of a venv's start-up): this pip installs into it
    # (`--python`), resolving the client's dependencies from the index and the local cache as any install does.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", str(source)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]

    probe = subprocess.run(
        [python, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    result = json.loads(probe.stdout)
    assert result["client"].startswith(str(venv))  # the installed copy, not this checkout
    assert result["call"] == ["POST", "/v1/users/alice/context", {"query": "tea", "max_tokens": 100}]
    assert not any(result["server_packages"].values()), result["server_packages"]
