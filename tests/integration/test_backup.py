"""`engram backup` and `engram restore` (issue: nothing lost): a backup taken from a populated database restores
into an empty one, or into an empty data directory, and answers exactly as before; a restore never writes
over data without --force, and refuses a file that is not a whole backup."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from ops.backup import DUMP_NAME, MANIFEST_NAME
from shared.context.packed import compile_context
from shared.infra.config import get_settings
from shared.infra.migrate import available_migrations
from tests.conftest import CeleryStack
from tests.integration.test_ingest_pipeline import configured, wait_idle
from tests.integration.test_pipeline import PIPELINE_ENV

pytestmark = pytest.mark.integration

QUERIES = ("Where does Alice's sister live?", "What class did Alice sign up for?", "What pet does Alice have?")


def engram(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=180,
    )


@pytest.fixture
def populated(celery_stack: CeleryStack, clean_state: Any, api: httpx.Client) -> Iterator[str]:
    """Offline model, a user with two sessions, extracted memories, transcript units with their vectors."""
    with configured(celery_stack, "offline", {**PIPELINE_ENV, "ENGRAM_LLM_PROVIDER": "offline"}):
        for session, lines in {
            "s1": ["My sister Rosa lives in Porto.", "I signed up for the pottery class on Tuesdays."],
            "s2": ["I have a cat named Miso.", "I am allergic to peanuts."],
        }.items():
            messages = [{"role": "user", "content": text, "created_at": "2023-05-08T13:56:00Z"} for text in lines]
            response = api.post(f"/v1/users/alice/sessions/{session}/messages", json={"messages": messages})
            assert response.status_code == 202, response.text
            wait_idle(api, session)
        yield os.environ["ENGRAM_DATABASE_URL"]


def _rows(url: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return {
            "users": conn.execute("SELECT id, external_id, display_name FROM users ORDER BY id").fetchall(),
            "messages": conn.execute(
                "SELECT id, session_id, role, content, created_at FROM session_messages ORDER BY id"
            ).fetchall(),
            "memories": conn.execute(
                "SELECT id, namespace, key, value, valid_from, source_message_ids FROM memories ORDER BY id"
            ).fetchall(),
            "chunks": conn.execute(
                "SELECT id, memory_id, message_id, text, embedding::text AS embedding FROM memory_chunks ORDER BY id"
            ).fetchall(),
        }


def _answers(url: str) -> list[str]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        tenant = conn.execute("SELECT tenant_id FROM users WHERE external_id = 'alice'").fetchone()
        assert tenant is not None
        return [
            compile_context(
                conn, get_settings(), tenant_id=tenant["tenant_id"], user_external_id="alice", max_tokens=400, query=q
            ).context
            for q in QUERIES
        ]


def test_a_backup_restores_into_an_empty_database_and_answers_as_before(
    populated: str, fresh_db_url: str, tmp_path: Path
) -> None:
    before = _rows(populated)
    assert before["memories"] and all(c["embedding"] for c in before["chunks"])  # vectors are part of it
    taken = engram("backup", str(tmp_path / "alice.backup"))
    assert taken.returncode == 0, taken.stderr
    assert "backed up to" in taken.stdout and "users" in taken.stdout

    with tarfile.open(tmp_path / "alice.backup") as archive:
        assert archive.getnames() == [MANIFEST_NAME, DUMP_NAME]
        manifest = json.loads(archive.extractfile(MANIFEST_NAME).read())  # type: ignore[union-attr]
    assert manifest["schema_version"] == max(m.version for m in available_migrations())
    assert manifest["embedding_space"]["dimension"] == len(json.loads(before["chunks"][0]["embedding"]))
    assert manifest["rows"]["memories"] == len(before["memories"])

    restored = engram("restore", str(tmp_path / "alice.backup"), ENGRAM_DATABASE_URL=fresh_db_url)
    assert restored.returncode == 0, restored.stderr
    assert _rows(fresh_db_url) == before
    assert _answers(fresh_db_url) == _answers(populated)
    assert any("Porto" in answer for answer in _answers(fresh_db_url))

    # Restoring again would write over what is there now: refused, and nothing changes.
    again = engram("restore", str(tmp_path / "alice.backup"), ENGRAM_DATABASE_URL=fresh_db_url)
    assert again.returncode == 1 and "not empty" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr
    with psycopg.connect(fresh_db_url) as conn:
        conn.execute("DELETE FROM memories WHERE id = %s", (before["memories"][0]["id"],))
    forced = engram("restore", str(tmp_path / "alice.backup"), "--force", ENGRAM_DATABASE_URL=fresh_db_url)
    assert forced.returncode == 0, forced.stderr
    assert _rows(fresh_db_url) == before


def test_a_backup_restores_into_an_empty_data_directory(populated: str, tmp_path: Path) -> None:
    assert engram("backup", str(tmp_path / "all.backup")).returncode == 0
    embedded = {"ENGRAM_DATABASE_URL": "", "ENGRAM_DATA_DIR": str(tmp_path / "data")}
    restored = engram("restore", str(tmp_path / "all.backup"), **embedded)
    assert restored.returncode == 0, restored.stderr
    # The data directory's own server holds it now: a backup of it has the same rows.
    retaken = engram("backup", str(tmp_path / "again.backup"), **embedded)
    assert retaken.returncode == 0, retaken.stderr
    manifests = []
    for name in ("all.backup", "again.backup"):
        with tarfile.open(tmp_path / name) as archive:
            manifests.append(json.loads(archive.extractfile(MANIFEST_NAME).read()))  # type: ignore[union-attr]
    assert manifests[0]["rows"] == manifests[1]["rows"] and manifests[0]["rows"]["memories"] > 0


def test_a_restore_refuses_what_is_not_a_whole_backup(populated: str, fresh_db_url: str, tmp_path: Path) -> None:
    assert engram("backup", str(tmp_path / "good.backup")).returncode == 0
    (tmp_path / "notes.txt").write_text("not a backup")
    with tarfile.open(tmp_path / "good.backup") as archive:
        manifest = json.loads(archive.extractfile(MANIFEST_NAME).read())  # type: ignore[union-attr]
        dump = archive.extractfile(DUMP_NAME).read()  # type: ignore[union-attr]

    def repack(name: str, manifest: dict[str, Any], dump: bytes) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w") as archive:
            for member, data in ((MANIFEST_NAME, json.dumps(manifest).encode()), (DUMP_NAME, dump)):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return path

    damaged = repack("damaged.backup", manifest, dump[:-100] + bytes(100))
    newer = repack("newer.backup", {**manifest, "schema_version": manifest["schema_version"] + 1}, dump)
    for path, reason in (
        (tmp_path / "notes.txt", "not an engram backup"),
        (tmp_path / "missing.backup", "no backup file"),
        (damaged, "damaged"),
        (newer, "newer than this engram knows"),
    ):
        refused = engram("restore", str(path), ENGRAM_DATABASE_URL=fresh_db_url)
        assert refused.returncode == 1 and reason in refused.stderr, (path, refused.stderr)
        assert "Traceback" not in refused.stderr
    with psycopg.connect(fresh_db_url) as conn:  # nothing was written
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
