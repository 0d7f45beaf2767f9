"""Adding connections (CLI, admin REST) and the environment shortcut for the single-tenant case.

ENGRAM_SLACK_SIGNING_SECRET + ENGRAM_SLACK_BOT_TOKEN and ENGRAM_TELEGRAM_BOT_TOKEN (+ optionally
ENGRAM_TELEGRAM_WEBHOOK_SECRET) create or update the connection `default` of the default tenant when the
gateway starts. A Telegram connection learns its bot's @username with getMe when it is added (best
effort: a delivery tries again later), which it needs to see mentions in groups.
"""

from __future__ import annotations

from shared.access.auth import DEFAULT_TENANT, ensure_tenant
from shared.adapters.telegram_bot_api import TelegramClient
from shared.channels.connections import (
    ENV_SLUG,
    Connection,
    ConnectionInvalid,
    tenant_connection,
    upsert_connection,
    validate,
)
from shared.channels.errors import SendError
from shared.infra import db
from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.infra.logging import get_logger

log = get_logger(__name__)


def telegram_username(token: str, settings: Settings) -> str | None:
    try:
        with TelegramClient(
            token, settings.telegram_api_url, min(5.0, settings.channel_http_timeout_seconds)
        ) as client:
            name = client.get_me().get("username")
    except SendError:
        return None
    return str(name) if name else None


def add_connection(
    conn: Conn,
    tenant_id: int,
    kind: str,
    slug: str,
    secrets: dict[str, str],
    settings: Settings,
    bot_username: str | None = None,
) -> tuple[Connection, bool]:
    """Create or update; ConnectionInvalid with the reason when it cannot be stored."""
    cleaned = validate(kind, slug, secrets)  # before any network call
    if kind == "telegram" and bot_username is None:
        bot_username = telegram_username(cleaned["bot_token"], settings)
    return upsert_connection(conn, tenant_id, kind, slug, cleaned, bot_username)


def env_secrets(settings: Settings) -> dict[str, dict[str, str]]:
    """The connections the environment asks for, by kind (a half-configured platform is an error)."""
    wanted: dict[str, dict[str, str]] = {}
    slack = {
        "signing_secret": settings.slack_signing_secret,
        "bot_token": settings.slack_bot_token,
    }
    if any(slack.values()):
        missing = [f"ENGRAM_SLACK_{name.upper()}" for name, value in slack.items() if value is None]
        if missing:
            raise ConnectionInvalid(f"the Slack shortcut also needs {', '.join(missing)}")
        wanted["slack"] = {name: value.get_secret_value() for name, value in slack.items() if value is not None}
    if settings.telegram_bot_token is not None:
        telegram = {"bot_token": settings.telegram_bot_token.get_secret_value()}
        if settings.telegram_webhook_secret is not None:
            telegram["webhook_secret"] = settings.telegram_webhook_secret.get_secret_value()
        wanted["telegram"] = telegram
    elif settings.telegram_webhook_secret is not None:
        raise ConnectionInvalid("ENGRAM_TELEGRAM_WEBHOOK_SECRET is set without ENGRAM_TELEGRAM_BOT_TOKEN")
    return wanted


def sync_env_connections(settings: Settings) -> list[Connection]:
    """Create or update the `default` connections the environment describes (nothing when it names none).

    All or nothing: every connection is validated before anything is written, and the writes share one
    transaction, so one malformed token refuses the whole environment shortcut (ConnectionInvalid) rather
    than storing half of it. The log lines come after the commit, so they never report a write that
    was rolled back."""
    requested = env_secrets(settings)
    if not requested:
        return []
    for kind, secrets in requested.items():
        validate(kind, ENV_SLUG, secrets)  # a malformed environment is refused before the database is touched
    with db.connection() as conn:
        tenant_id = ensure_tenant(conn, DEFAULT_TENANT)
        stored = tenant_connection(conn, tenant_id, "telegram", ENV_SLUG) if "telegram" in requested else None
    if stored is not None and "webhook_secret" not in requested["telegram"] and stored.secret("webhook_secret"):
        # Without ENGRAM_TELEGRAM_WEBHOOK_SECRET, keep the secret the webhook was registered with: a new
        # random one on every restart would make Telegram's calls 401 until someone re-ran set-webhook.
        requested["telegram"]["webhook_secret"] = stored.secret("webhook_secret")
    wanted = {kind: validate(kind, ENV_SLUG, secrets) for kind, secrets in requested.items()}
    usernames = {
        kind: telegram_username(secrets["bot_token"], settings) if kind == "telegram" else None
        for kind, secrets in wanted.items()
    }
    written: list[tuple[Connection, bool]] = []
    with db.connection() as conn:
        for kind, secrets in wanted.items():
            written.append(upsert_connection(conn, tenant_id, kind, ENV_SLUG, secrets, usernames[kind]))
    for connection, created in written:
        log.info(
            "channel connection from the environment",
            kind=connection.kind,
            slug=ENV_SLUG,
            action="created" if created else "updated",
        )
    return [connection for connection, _ in written]
