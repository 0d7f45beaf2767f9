"""`engram channels …` (Slack and Telegram connections, Telegram webhook and polling) and `engram users link`.

Straight against the database, like `engram keys`. Secrets are taken from options, or asked for without
echo when left out (an option shows in `ps` and the shell history; the prompt does not).
"""

from __future__ import annotations

import json
import signal
import sys
from types import FrameType
from typing import Annotated, Any

import typer

from ops.cli_support import JsonOption, TenantOption, fail, load_settings, require_tenant, transaction

channels_app = typer.Typer(help="Slack and Telegram connections.", no_args_is_help=True)
telegram_app = typer.Typer(help="Telegram webhook and long polling.", no_args_is_help=True)
users_app = typer.Typer(help="Users across channels.", no_args_is_help=True)
channels_app.add_typer(telegram_app, name="telegram")

NameOption = Annotated[str, typer.Option("--name", help="The connection's name (slug)")]


def _secret(value: str | None, label: str, required: bool) -> str | None:
    if value is not None or not required:
        return value
    if not sys.stdin.isatty():
        fail(f"{label} is required: pass it as an option (or run in a terminal to be asked)", 2)
    return str(typer.prompt(label, hide_input=True))


def _webhook_path(kind: str, slug: str) -> str:
    return f"/v1/channels/slack/{slug}/events" if kind == "slack" else f"/v1/channels/telegram/{slug}/webhook"


@channels_app.command("add")
def add(
    kind: Annotated[str, typer.Argument(help="slack or telegram")],
    name: NameOption,
    tenant: TenantOption = "default",
    signing_secret: Annotated[str | None, typer.Option(help="Slack: the app's signing secret")] = None,
    bot_token: Annotated[str | None, typer.Option(help="Slack xoxb-… bot token, or Telegram BotFather token")] = None,
    webhook_secret: Annotated[
        str | None, typer.Option(help="Telegram: the webhook's secret token (default: generated)")
    ] = None,
    bot_username: Annotated[str | None, typer.Option(help="Telegram: the bot's @name (default: asked getMe)")] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a connection (or replace the secrets of the tenant's connection of that name)."""
    from shared.channels.connections import ConnectionInvalid, public
    from shared.channels.setup import add_connection

    if kind not in ("slack", "telegram"):
        fail(f"unknown channel {kind!r}: use slack or telegram", 2)
    secrets = {
        "bot_token": _secret(bot_token, "bot token", True),
        "signing_secret": _secret(signing_secret, "signing secret", kind == "slack"),
        "webhook_secret": webhook_secret if kind == "telegram" else None,
    }
    settings = load_settings()
    try:
        with transaction() as conn:
            connection, created = add_connection(
                conn,
                require_tenant(conn, tenant, create=True),
                kind,
                name,
                {k: v for k, v in secrets.items() if v is not None},
                settings,
                bot_username,
            )
    except ConnectionInvalid as exc:
        fail(str(exc), 2)
    out = {**public(connection), "tenant": tenant, "webhook_path": _webhook_path(kind, name), "created": created}
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{'added' if created else 'updated'} {kind} connection {name!r} of tenant {tenant!r}")
    typer.echo(f"webhook: https://<your host>{out['webhook_path']}")
    if kind == "telegram":
        typer.echo(f"bot: @{connection.bot_username or '? (getMe failed; mentions in groups wait for it)'}")
        typer.echo(f"next: engram channels telegram set-webhook https://<your host> --name {name}")


@channels_app.command("list")
def list_connections(tenant: TenantOption = "default", as_json: JsonOption = False) -> None:
    """The tenant's connections (which secrets are set, never their values)."""
    from shared.channels.connections import list_connections as listing

    with transaction() as conn:
        rows = listing(conn, require_tenant(conn, tenant))
    if as_json:
        typer.echo(json.dumps({"tenant": tenant, "connections": rows}, default=str))
        return
    for row in rows:
        bot = f" @{row['bot_username']}" if row["bot_username"] else ""
        path = _webhook_path(row["kind"], row["slug"])
        typer.echo(f"{row['kind']:<9} {row['slug']:<20}{bot}  {path}  secrets: {','.join(row['secrets_set'])}")


@channels_app.command("remove")
def remove(kind: str, name: str, tenant: TenantOption = "default") -> None:
    """Remove a connection (its identity links and pending replies go; users and memories stay)."""
    from shared.channels.connections import delete_connection

    with transaction() as conn:
        removed = delete_connection(conn, require_tenant(conn, tenant), kind, name)
    if not removed:
        fail(f"tenant {tenant!r} has no {kind} connection {name!r}")
    typer.echo(f"removed {kind} connection {name!r}")


def _telegram(tenant: str, name: str) -> Any:
    from shared.channels.connections import tenant_connection

    with transaction() as conn:
        connection = tenant_connection(conn, require_tenant(conn, tenant), "telegram", name)
    if connection is None:
        fail(f"tenant {tenant!r} has no telegram connection {name!r} (engram channels add telegram …)")
    return connection


def _client(connection: Any) -> Any:
    from shared.adapters.telegram_bot_api import TelegramClient

    settings = load_settings()
    return TelegramClient(connection.secret("bot_token"), settings.telegram_api_url, 60)


@telegram_app.command("set-webhook")
def set_webhook(
    url: Annotated[str, typer.Argument(help="The gateway's public https URL (or the full webhook URL)")],
    name: NameOption = "default",
    tenant: TenantOption = "default",
) -> None:
    """Point the bot's webhook at this gateway (setWebhook with the connection's secret token)."""
    from shared.channels.errors import SendError

    connection = _telegram(tenant, name)
    path = _webhook_path("telegram", name)
    full = url if "/v1/channels/telegram/" in url else url.rstrip("/") + path
    if not full.startswith(("https://", "http://")):
        fail(f"not a URL: {url!r}", 2)
    try:
        with _client(connection) as client:
            client.set_webhook(full, connection.secret("webhook_secret"))
    except SendError as exc:
        fail(connection.redact(str(exc)))
    typer.echo(f"webhook set: {full}")


@telegram_app.command("poll")
def poll(
    name: NameOption = "default",
    tenant: TenantOption = "default",
    timeout: Annotated[int, typer.Option(help="Seconds one getUpdates call waits for news")] = 30,
    once: Annotated[bool, typer.Option("--once", help="One getUpdates call, then exit")] = False,
) -> None:
    """Long polling for local use without a public URL (removes the webhook first). Ctrl-C stops."""
    from shared.channels.errors import SendError
    from shared.channels.polling import PollState, poll_once
    from workers.dispatch import dispatch_accepted

    connection = _telegram(tenant, name)
    settings = load_settings()
    state = PollState()
    stop = {"now": False}

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    with _client(connection) as client:
        try:
            client.delete_webhook()
        except SendError as exc:
            fail(connection.redact(str(exc)))
        typer.echo(f"polling telegram connection {name!r} (Ctrl-C stops)", err=True)
        try:
            while not stop["now"]:
                try:
                    poll_once(connection, client, state, settings, dispatch_accepted, timeout=timeout)
                except SendError as exc:
                    typer.secho(f"getUpdates failed: {connection.redact(str(exc))}", fg=typer.colors.YELLOW, err=True)
                    if once:
                        raise typer.Exit(1) from None
                if once:
                    break
        except KeyboardInterrupt:
            pass
    typer.echo(f"updates: {state.received} received, {state.accepted} new, {state.duplicates} duplicates", err=True)


@users_app.command("link")
def link(
    user: Annotated[str, typer.Argument(help="The engram user (external id) the identities belong to")],
    identities: Annotated[list[str], typer.Argument(help="kind:connection:platform-user-id, e.g. slack:default:U0123")],
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Map Slack and Telegram identities to one engram user, so memory follows the person."""
    import re

    from shared.channels.connections import tenant_connection
    from shared.channels.identities import PLATFORM_ID_PATTERN, link_identity

    id_pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$"
    if not re.match(id_pattern, user):
        fail(f"invalid user id {user!r}: letters, digits and ._:@- (at most 128)", 2)
    parsed = []
    for spec in identities:
        parts = spec.split(":", 2)
        if len(parts) != 3 or parts[0] not in ("slack", "telegram") or not re.match(PLATFORM_ID_PATTERN, parts[2]):
            fail(f"invalid identity {spec!r}: use slack:<connection>:<user id> or telegram:<connection>:<user id>", 2)
        parsed.append(parts)
    linked = []
    with transaction() as conn:
        tenant_id = require_tenant(conn, tenant)
        for kind, slug, platform_id in parsed:
            connection = tenant_connection(conn, tenant_id, kind, slug)
            if connection is None:  # fail() raises inside the transaction: nothing is linked
                fail(f"tenant {tenant!r} has no {kind} connection {slug!r}")
            linked.append(link_identity(conn, connection, platform_id, user))
    if as_json:
        typer.echo(json.dumps({"tenant": tenant, "linked": linked}))
        return
    for row in linked:
        before = f" (was {row['previous_user_id']})" if row["previous_user_id"] else ""
        typer.echo(f"{row['kind']}:{row['connection']}:{row['platform_user_id']} → {row['user_id']}{before}")
