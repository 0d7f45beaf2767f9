"""Channel secrets at rest (issue 30): stored as Fernet tokens, never in plain text; rotated with
`engram secrets rotate` without downtime; rows from before migration 0017 encrypted at start; a wrong or
missing key is a message, not a traceback. The real gateway and Celery workers; the fake platforms."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner, Result

from ops.cli import app
from ops.fake_channels import FakeChannels
from ops.fake_llm import FakeLLM, FakeReply
from ops.process_commands import gateway_argv
from shared.access.auth import ensure_tenant
from shared.channels.connections import get_connection
from shared.infra import db
from shared.infra.config import get_settings
from shared.infra.db import connect
from shared.infra.migrate import apply_migrations, available_migrations
from shared.infra.secretbox import KeyRing, generate_key, key_file, keyring, parse_keys
from tests.conftest import CeleryStack, Gateway
from tests.integration.test_channels import (
    SIGNING_SECRET,
    SLACK_TOKEN,
    TG_SECRET,
    TG_TOKEN,
    add_connection,
    channel_env,
    post_slack,
    post_telegram,
    settle,
    slack_dm,
    tg_update,
)

pytestmark = pytest.mark.integration

PLAIN = (SIGNING_SECRET, SLACK_TOKEN, TG_TOKEN, TG_SECRET)


@pytest.fixture(scope="session")
def fake_channels_server() -> Iterator[FakeChannels]:
    with FakeChannels() as server:
        yield server


@pytest.fixture
def fake(fake_channels_server: FakeChannels) -> FakeChannels:
    fake_channels_server.reset()
    return fake_channels_server


@pytest.fixture
def stack(celery_stack: CeleryStack, fake: FakeChannels, api: httpx.Client, fake_llm: FakeLLM) -> CeleryStack:
    """Workers that reach the fake platforms (as in test_channels.py); `api` has emptied the tables."""
    celery_stack.ensure("anthropic", **channel_env(fake))
    return celery_stack


def raw_rows() -> str:
    """Every stored byte of every connection row, as Postgres prints the whole row."""
    with db.connection() as conn:
        rows = conn.execute("SELECT t::text AS row FROM channel_connections t ORDER BY id").fetchall()
    return "\n".join(row["row"] for row in rows)


def stored_tokens() -> dict[str, dict[str, str]]:
    with db.connection() as conn:
        rows = conn.execute("SELECT slug, secrets, secrets_encrypted FROM channel_connections").fetchall()
    assert all(row["secrets"] == {} for row in rows)  # nothing left in the plain column
    return {row["slug"]: row["secrets_encrypted"] for row in rows}


def cli(*args: str) -> Result:
    get_settings.cache_clear()
    return CliRunner().invoke(app, list(args))


def slack_round_trip(gateway: Gateway, fake: FakeChannels, fake_llm: FakeLLM, slug: str, n: int) -> None:
    """A signed Slack event is accepted (the signing secret decrypts) and answered (so does the bot token)."""
    fake_llm.script(FakeReply(text=f"answer {n}"), match=f"question {n}")
    response = post_slack(gateway.url, slack_dm(f"question {n}", event_id=f"EvS{n}"), slug=slug)
    assert response.status_code == 200, response.text
    calls = fake.slack.wait_for("chat.postMessage", count=n)
    assert calls[-1].token == SLACK_TOKEN and calls[-1].body["text"] == f"answer {n}"


@pytest.fixture
def key_file_restored() -> Iterator[Path]:
    """The session's key file, put back afterwards (rotation tests replace it)."""
    path = key_file(get_settings())
    before = path.read_text()
    yield path
    path.write_text(before)
    os.utime(path)
    get_settings.cache_clear()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Environment changes for this test only; the settings cache is cleared both ways (the in-process
    gateway reads the same settings)."""
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


def test_api_and_cli_store_no_plaintext_and_webhooks_and_replies_work(
    gateway: Gateway,
    stack: CeleryStack,
    fake: FakeChannels,
    fake_llm: FakeLLM,
    api: httpx.Client,
    env: pytest.MonkeyPatch,
) -> None:
    created = api.post(
        "/v1/admin/channels",
        json={"kind": "slack", "slug": "team", "signing_secret": SIGNING_SECRET, "bot_token": SLACK_TOKEN},
    )
    assert created.status_code == 201, created.text
    env.setenv("ENGRAM_TELEGRAM_API_URL", fake.telegram_api_url)
    added = cli("channels", "add", "telegram", "--tenant", "tenant-a", "--name", "team", "--bot-token", TG_TOKEN,
                "--webhook-secret", TG_SECRET)  # fmt: skip
    assert added.exit_code == 0, added.output

    stored = raw_rows()
    assert stored.count("\n") == 1  # both rows
    assert not [secret for secret in PLAIN if secret in stored]
    ring = keyring(get_settings())
    tokens = stored_tokens()
    assert ring.open(tokens["team"]["bot_token"]) in (SLACK_TOKEN, TG_TOKEN)
    listed = api.get("/v1/admin/channels").json()
    assert [c["secrets_set"] for c in listed] == [["bot_token", "signing_secret"], ["bot_token", "webhook_secret"]]

    slack_round_trip(gateway, fake, fake_llm, "team", 1)
    fake_llm.script(FakeReply(text="telegram answer"), match="hello telegram")
    assert post_telegram(gateway.url, tg_update(901, "hello telegram")).status_code == 200
    (sent,) = fake.telegram.wait_for("sendMessage")
    assert sent.token == TG_TOKEN and sent.body["text"] == "telegram answer"
    assert post_telegram(gateway.url, tg_update(902, "x"), secret="wrong-secret").status_code == 401


def test_rotate_a_generated_key_file_then_drop_the_old_key_without_a_restart(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM, key_file_restored: Path
) -> None:
    add_connection("slack")
    before = stored_tokens()["team"]
    old_keys = parse_keys(key_file_restored.read_text(), "file")
    slack_round_trip(gateway, fake, fake_llm, "team", 1)  # the worker has the old key file in its cache

    rotated = cli("secrets", "rotate", "--new-key")
    assert rotated.exit_code == 0, rotated.output
    assert "re-encrypted the secrets of 1 channel connection(s)" in rotated.output
    keys = parse_keys(key_file_restored.read_text(), "file")
    assert len(keys) == 2 and keys[1:] == old_keys and (key_file_restored.stat().st_mode & 0o777) == 0o600
    after = stored_tokens()["team"]
    assert after != before
    new_only = KeyRing(keys[:1], "new")
    assert new_only.open(after["bot_token"]) == SLACK_TOKEN
    assert not [secret for secret in PLAIN if secret in raw_rows()]

    dropped = cli("secrets", "rotate", "--drop-old")
    assert dropped.exit_code == 0 and "older keys dropped" in dropped.output, dropped.output
    assert parse_keys(key_file_restored.read_text(), "file") == keys[:1]
    # The gateway and the worker process re-read the changed file: the webhook verifies, the reply is sent.
    slack_round_trip(gateway, fake, fake_llm, "team", 2)
    settle()


def test_rotate_keys_from_the_environment_then_drop_the_old_one(
    gateway: Gateway, api: httpx.Client, env: pytest.MonkeyPatch
) -> None:
    old, new = generate_key(), generate_key()
    env.setenv("ENGRAM_SECRET_KEY", old)
    get_settings.cache_clear()
    add_connection("slack")
    assert KeyRing(parse_keys(old, "old"), "old").open(stored_tokens()["team"]["bot_token"]) == SLACK_TOKEN

    env.setenv("ENGRAM_SECRET_KEY", f"{new}, {old}")  # step 1: the new key first, the old one still decrypts
    refused = cli("secrets", "rotate", "--new-key")
    assert refused.exit_code == 2 and "ENGRAM_SECRET_KEY" in refused.output
    rotated = cli("secrets", "rotate")  # step 2
    assert rotated.exit_code == 0 and "first key of ENGRAM_SECRET_KEY" in rotated.output, rotated.output

    env.setenv("ENGRAM_SECRET_KEY", new)  # step 3: the old key is gone
    get_settings.cache_clear()
    with db.connection() as conn:
        connection = get_connection(conn, "slack", "team")
    assert connection is not None and connection.secret("signing_secret") == SIGNING_SECRET
    challenge = post_slack(gateway.url, {"type": "url_verification", "challenge": "c-rot"})
    assert challenge.status_code == 200 and challenge.json() == {"challenge": "c-rot"}


def test_a_plain_row_from_before_0017_is_encrypted_at_start_and_keeps_working(
    gateway: Gateway, stack: CeleryStack, fake: FakeChannels, fake_llm: FakeLLM
) -> None:
    with db.connection() as conn:
        conn.execute(
            "INSERT INTO channel_connections (tenant_id, kind, slug, secrets) VALUES (%s, 'slack', 'old', %s)",
            (ensure_tenant(conn, "tenant-a"), Jsonb({"signing_secret": SIGNING_SECRET, "bot_token": SLACK_TOKEN})),
        )
    slack_round_trip(gateway, fake, fake_llm, "old", 1)  # read as it is until sealed

    migrated = cli("migrate")
    assert migrated.exit_code == 0, migrated.output
    assert "encrypted the plain-text secrets of 1 channel connection(s)" in migrated.output
    assert not [secret for secret in PLAIN if secret in raw_rows()]
    again = cli("migrate")
    assert again.exit_code == 0 and "encrypted" not in again.output  # idempotent
    slack_round_trip(gateway, fake, fake_llm, "old", 2)
    settle()


def test_an_upgrade_keeps_plain_rows_readable_and_engram_up_seals_them_with_a_generated_key(
    fresh_db_url: str, tmp_path: Path, env: pytest.MonkeyPatch
) -> None:
    """Migrations up to 0016, a connection stored then; 0017 alone cannot encrypt (no key in SQL); `engram
    migrate` without a key warns and leaves it readable; `engram up`'s step generates the key file and seals."""
    from ops.stack import Stack
    from shared.infra import migrate

    every = available_migrations()
    env.setattr(migrate, "available_migrations", lambda: [m for m in every if m.version <= 16])
    with connect(fresh_db_url) as conn:
        apply_migrations(conn)
        tenant = conn.execute("INSERT INTO tenants (name) VALUES ('t') RETURNING id").fetchone()
        assert tenant is not None
        conn.execute(
            "INSERT INTO channel_connections (tenant_id, kind, slug, secrets) VALUES (%s, 'telegram', 'bot', %s)",
            (tenant["id"], Jsonb({"bot_token": TG_TOKEN, "webhook_secret": TG_SECRET})),
        )
    env.setattr(migrate, "available_migrations", lambda: every)

    data_dir = tmp_path / "data"
    subprocess_env = {**os.environ, "ENGRAM_DATABASE_URL": fresh_db_url, "ENGRAM_DATA_DIR": str(data_dir)}
    subprocess_env.pop("ENGRAM_SECRET_KEY", None)
    keyless = subprocess.run([sys.executable, "-m", "ops.cli", "migrate"], capture_output=True, text=True,
                             env=subprocess_env, timeout=120)  # fmt: skip
    assert keyless.returncode == 0, keyless.stderr
    assert "1 channel connection(s) keep plain-text secrets" in keyless.stderr and "Traceback" not in keyless.stderr
    assert not (data_dir / "secret-key").exists()  # migrate does not make a key a container may throw away

    env.setenv("ENGRAM_DATABASE_URL", fresh_db_url)
    env.setenv("ENGRAM_DATA_DIR", str(data_dir))
    env.delenv("ENGRAM_SECRET_KEY", raising=False)
    get_settings.cache_clear()
    with connect(fresh_db_url) as conn:
        plain = conn.execute("SELECT kind, slug, secrets, secrets_encrypted FROM channel_connections").fetchone()
        assert plain is not None and plain["secrets"]["bot_token"] == TG_TOKEN
        connection = get_connection(conn, "telegram", "bot")
        assert connection is not None and connection.secret("webhook_secret") == TG_SECRET
    with connect(fresh_db_url) as conn:
        conn.autocommit = False
        Stack(get_settings())._seal_channel_secrets(conn)  # what `engram up` runs after the migrations
        path = data_dir / "secret-key"
        assert (path.stat().st_mode & 0o777) == 0o600
        row = conn.execute("SELECT t::text AS row FROM channel_connections t").fetchone()
        assert row is not None and TG_TOKEN not in row["row"] and TG_SECRET not in row["row"]
        connection = get_connection(conn, "telegram", "bot")
        assert connection is not None and connection.secret("bot_token") == TG_TOKEN


def test_a_wrong_or_missing_key_is_a_clear_error(
    gateway: Gateway, api: httpx.Client, env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    add_connection("slack")
    add_connection("telegram")
    env.setenv("ENGRAM_SECRET_KEY", generate_key())  # not the key that encrypted them
    for args in (("migrate",), ("secrets", "rotate"), ("channels", "telegram", "set-webhook", "https://x.example",
                                                        "--name", "team", "--tenant", "tenant-a")):  # fmt: skip
        result = cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert "do not decrypt with the keys of ENGRAM_SECRET_KEY" in result.output, result.output
        assert "Traceback" not in result.output and not [secret for secret in PLAIN if secret in result.output]
    refused = post_slack(gateway.url, {"type": "url_verification", "challenge": "c"})
    assert refused.status_code == 503 and refused.json()["code"] == "secret_key"
    assert "do not decrypt" in refused.json()["detail"]

    env.setenv("ENGRAM_SECRET_KEY", "not-a-fernet-key")
    malformed = cli("secrets", "rotate")
    assert malformed.exit_code == 2 and "is not a Fernet key" in malformed.output

    env.delenv("ENGRAM_SECRET_KEY")
    env.setenv("ENGRAM_DATA_DIR", str(tmp_path))  # no key file there
    missing = cli("channels", "add", "slack", "--tenant", "tenant-a", "--name", "other",
                  "--signing-secret", SIGNING_SECRET, "--bot-token", SLACK_TOKEN)  # fmt: skip
    assert missing.exit_code == 1 and "no secret key" in missing.output and "Traceback" not in missing.output
    created = api.post(
        "/v1/admin/channels",
        json={"kind": "slack", "slug": "other", "signing_secret": SIGNING_SECRET, "bot_token": SLACK_TOKEN},
    )
    assert created.status_code == 503 and "no secret key" in created.json()["detail"]
    with db.connection() as conn:
        assert get_connection(conn, "slack", "other") is None


def test_a_reply_whose_token_does_not_decrypt_waits_for_the_right_key(
    api: httpx.Client, fake: FakeChannels, env: pytest.MonkeyPatch
) -> None:
    """A wrong key is the operator's to fix: the delivery is put back with the reason, not failed, and is
    sent once the key is right again. `engram up` refuses to start on it."""
    from ops.stack import Stack, StackError
    from shared.channels.sending import deliver

    connection = add_connection("slack")
    with db.connection() as conn:
        row = conn.execute(
            """INSERT INTO channel_deliveries (tenant_id, connection_id, target, text, status)
               VALUES (%s, %s, %s, 'kept for later', 'pending') RETURNING id""",
            (connection.tenant_id, connection.id, Jsonb({"channel": "D1"})),
        ).fetchone()
    assert row is not None
    env.setenv("ENGRAM_SLACK_API_URL", fake.slack_api_url)
    env.setenv("ENGRAM_SECRET_KEY", generate_key())
    get_settings.cache_clear()
    assert deliver(row["id"], get_settings()) == "rescheduled"
    with db.connection() as conn:
        waiting = conn.execute("SELECT status, attempts, last_error FROM channel_deliveries").fetchone()
        assert waiting is not None and waiting["status"] == "pending" and waiting["attempts"] == 0
        assert "do not decrypt" in waiting["last_error"] and SLACK_TOKEN not in waiting["last_error"]
        with pytest.raises(StackError, match="do not decrypt"):
            Stack(get_settings())._seal_channel_secrets(conn)
    assert fake.slack.calls("chat.postMessage") == []

    env.delenv("ENGRAM_SECRET_KEY")  # the key file again
    get_settings.cache_clear()
    with db.connection() as conn:
        conn.execute("UPDATE channel_deliveries SET next_attempt_at = now()")
    deliver(row["id"], get_settings())
    (sent,) = fake.slack.wait_for("chat.postMessage")
    assert sent.token == SLACK_TOKEN and sent.body["text"] == "kept for later"


def test_doctor_reports_the_key_and_a_gateway_without_it_does_not_start(fresh_db_url: str, tmp_path: Path) -> None:
    """`engram doctor` says where the key comes from and that it opens every stored secret, or why not; a
    gateway whose key does not open them refuses to start (every webhook would be refused) and says why."""
    right, wrong = generate_key(), generate_key()
    base = {k: v for k, v in os.environ.items() if k != "ENGRAM_SECRET_KEY"}
    base |= {"ENGRAM_DATABASE_URL": fresh_db_url, "ENGRAM_DATA_DIR": str(tmp_path)}

    def engram(*args: str, key: str) -> subprocess.CompletedProcess[str]:
        env = base | {"ENGRAM_SECRET_KEY": key}
        return subprocess.run(
            [sys.executable, "-m", "ops.cli", *args], capture_output=True, text=True, env=env, timeout=120
        )

    assert engram("migrate", key=right).returncode == 0
    added = engram("channels", "add", "slack", "--tenant", "tenant-a", "--name", "team",
                   "--signing-secret", SIGNING_SECRET, "--bot-token", SLACK_TOKEN, key=right)  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr

    healthy = engram("doctor", key=right)
    line = next(line for line in healthy.stdout.splitlines() if "secret key:" in line)
    assert line.startswith("ok") and "from ENGRAM_SECRET_KEY" in line and "secrets of 1 connection" in line

    broken = engram("doctor", key=wrong)
    line = next(line for line in broken.stdout.splitlines() if "secret key:" in line)
    assert line.startswith("FAIL") and "do not decrypt" in line and broken.returncode == 1
    assert "Traceback" not in broken.stdout + broken.stderr
    assert not [secret for secret in PLAIN if secret in broken.stdout + broken.stderr]

    gateway = subprocess.run(
        gateway_argv("127.0.0.1", 0),
        capture_output=True,
        text=True,
        env=base | {"ENGRAM_SECRET_KEY": wrong},
        timeout=180,
    )
    assert gateway.returncode != 0 and "do not decrypt" in gateway.stderr
    assert not [secret for secret in PLAIN if secret in gateway.stderr]
