"""The `engram` command."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from ops.channels_cli import channels_app, users_app
from ops.cli_support import client_args, fail, load_settings
from ops.import_cli import import_command
from ops.jobs_cli import jobs_app
from ops.keys_cli import keys_app
from ops.secrets_cli import secrets_app

if TYPE_CHECKING:  # the HTTP client loads only for the commands that talk to the gateway
    from ops.client import EngramClient
    from shared.config import Settings
    from shared.db import Conn

app = typer.Typer(help="engram: durable, automatic memory for chat agents.", no_args_is_help=True, add_completion=False)
app.add_typer(keys_app, name="keys")
app.command("import")(import_command)
app.add_typer(jobs_app, name="jobs")
app.add_typer(channels_app, name="channels")
app.add_typer(users_app, name="users")
app.add_typer(secrets_app, name="secrets")


_fail = fail
_settings = load_settings


# --------------------------------------------------------------------------------------------- up


class _Stop(Exception):
    pass


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


@app.command()
def up(
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Run as a cluster on this machine: 2 gateways on one port, a worker pool per queue group, 2 beats",
        ),
    ] = False,
) -> None:
    """Start the whole stack in the foreground (Ctrl-C stops it)."""
    from ops.stack import Stack, StackError

    settings = _settings()
    stack = Stack(settings, cluster=cluster)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        banner = stack.start()
        typer.echo(banner)
        while True:
            stack.supervisor.check_children()
            time.sleep(1)
    except _Stop as stop:
        typer.echo(f"\n{stop}: stopping engram…")
    except StackError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        stack.stop()
        raise typer.Exit(1) from None
    except Exception as exc:
        typer.secho(f"error: {type(exc).__name__}: {exc}", fg=typer.colors.RED, err=True)
        stack.stop()
        raise typer.Exit(1) from None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean stop
    stack.stop()
    typer.echo("engram stopped; data kept in " + str(settings.data_dir))


# ----------------------------------------------------------------------------------------- worker


@app.command()
def worker(pool: Annotated[str, typer.Argument(help="The pool: turns, memory, embeddings or maintenance")]) -> None:
    """Run one worker pool (its queues, ENGRAM_POOL_<POOL>_MIN/MAX_PROCESSES as Celery --autoscale bounds)."""
    from ops.process_commands import UnknownPool, pool_argv

    settings = _settings()
    try:
        argv = pool_argv(settings, pool)
    except UnknownPool as exc:
        _fail(str(exc))
    os.execv(argv[0], argv)  # the worker replaces this process: signals and the exit code are Celery's


# ---------------------------------------------------------------------------------------- migrate


@app.command()
def migrate(
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Apply nothing: list the pending migrations; exit 1 if any, 2 if the schema is newer"
        ),
    ] = False,
) -> None:
    """Apply pending database migrations (safe to run any time, from several processes)."""
    from shared.db import connect
    from shared.migrate import SchemaTooNew, apply_migrations, check_schema_known, pending_migrations
    from shared.secretbox import SecretKeyError, key_file
    from shared.services import ServiceNotConfigured

    settings = _settings()
    if check:
        try:
            with connect() as conn:
                check_schema_known(conn)
                pending = pending_migrations(conn)
        except ServiceNotConfigured as exc:
            _fail(str(exc))
        except SchemaTooNew as exc:
            _fail(str(exc), 2)
        except Exception as exc:
            _fail(f"cannot read the schema: {exc}")
        if not pending:
            typer.echo("the database is up to date: nothing to migrate")
            return
        typer.echo(f"{len(pending)} migration(s) pending:" + "".join(f"\n  {m.version:04d}_{m.name}" for m in pending))
        raise typer.Exit(1)
    try:
        with connect() as conn:
            check_schema_known(conn)
            applied = apply_migrations(conn)
            if settings.dev_api_key is not None:
                # Deployments (docker-compose) fix the default tenant's key through the environment.
                from shared.auth import DEFAULT_TENANT, ensure_tenant, register_key

                conn.autocommit = False
                register_key(conn, ensure_tenant(conn, DEFAULT_TENANT), settings.dev_api_key.get_secret_value(), "dev")
                conn.commit()
            if settings.metrics_api_key is not None:
                # Prometheus's key in docker-compose / Kubernetes: the `metrics` scope and nothing else.
                from shared.auth import DEFAULT_TENANT, ensure_tenant, register_key

                conn.autocommit = False
                tenant_id = ensure_tenant(conn, DEFAULT_TENANT)
                scraper_key = settings.metrics_api_key.get_secret_value()
                register_key(conn, tenant_id, scraper_key, "metrics", scopes=["metrics"])
                conn.commit()
            sealed, unsealed = _seal_channel_secrets(conn, settings)
    except ServiceNotConfigured as exc:
        _fail(str(exc))
    except SchemaTooNew as exc:
        _fail(str(exc), 2)
    except SecretKeyError as exc:
        _fail(f"the migrations are applied, but {exc}")
    except Exception as exc:
        _fail(f"migration failed: {exc}")
    typer.echo(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m.version:04d}_{m.name}" for m in applied))
    if sealed:
        typer.echo(f"encrypted the plain-text secrets of {sealed} channel connection(s)")
    if unsealed:
        typer.secho(
            f"warning: {unsealed} channel connection(s) keep plain-text secrets: no key to encrypt them with. "
            f"Set ENGRAM_SECRET_KEY (the same in every process; `engram secrets generate-key` prints one), or "
            f"start with `engram up` (it generates {key_file(settings)}), then run `engram migrate` again",
            fg=typer.colors.YELLOW,
            err=True,
        )


def _seal_channel_secrets(conn: Conn, settings: Settings) -> tuple[int, int]:
    """(connections sealed, connections left in plain text for want of a key). `engram migrate` does not
    generate a key file: in a container its data dir may be thrown away, and the secrets with it."""
    from shared.channels.connections import count_plain_secrets, seal_at_start
    from shared.secretbox import SecretKeyMissing

    conn.autocommit = False
    try:
        sealed = seal_at_start(conn, settings, create_key=False)
    except SecretKeyMissing:
        conn.rollback()
        return 0, count_plain_secrets(conn)
    conn.commit()
    return sealed, 0


# ----------------------------------------------------------------------------------- backup, restore


@app.command()
def backup(
    file: Annotated[
        Path | None, typer.Argument(help="Where to write it (default: engram-<UTC time>.backup here)")
    ] = None,
) -> None:
    """Back up the whole database to one file, consistent while the stack runs (no stop needed)."""
    from ops.backup import BackupError, database_for, write_backup

    settings = _settings()
    target = file or Path(f"engram-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.backup")
    try:
        with database_for(settings) as url:
            manifest = write_backup(url, target)
    except BackupError as exc:
        _fail(str(exc))
    rows = ", ".join(f"{n} {table}" for table, n in manifest.rows.items())
    typer.echo(f"backed up to {target} ({manifest.dump_bytes / 1e6:.1f} MB; schema {manifest.schema_version}; {rows})")


@app.command()
def restore(
    file: Annotated[Path, typer.Argument(help="A file `engram backup` wrote")],
    force: Annotated[bool, typer.Option("--force", help="Replace a database that is not empty")] = False,
) -> None:
    """Restore a backup into an empty database (the data directory's, or ENGRAM_DATABASE_URL's)."""
    from ops.backup import BackupError, database_for, restore_backup, running_stack_pid

    settings = _settings()
    if force and not settings.database_url and (pid := running_stack_pid(settings)) is not None:
        _fail(f"engram up is running from {settings.data_dir} (pid {pid}): stop it before replacing its database")
    try:
        with database_for(settings) as url:
            restored = restore_backup(url, file, force=force)
    except BackupError as exc:
        _fail(str(exc))
    manifest = restored.manifest
    rows = ", ".join(f"{n} {table}" for table, n in restored.rows.items())
    typer.echo(f"restored {file} (taken {manifest.created_at} by engram {manifest.engram_version}; {rows})")
    if restored.migrated:
        typer.echo(f"migrated the restored schema from {manifest.schema_version} to {restored.migrated[-1]}")


# ---------------------------------------------------------------------------------------- reindex


@app.command()
def reindex() -> None:
    """Re-embed every chunk with the configured embedding model (after changing model or dimension).

    Search falls back to full text while it runs; it can be interrupted and run again."""
    from shared import db
    from shared.embeddings import current_space, embedder_from_settings
    from shared.embeddings import reindex as run_reindex
    from shared.embeddings.space import follow_recorded_space
    from shared.services import ServiceNotConfigured

    settings = _settings()
    embedder = embedder_from_settings(settings)
    try:
        with db.connection() as conn:
            # The default backend keeps the recorded local space; say the model it will really use.
            follow_recorded_space(embedder, current_space(conn))
    except ServiceNotConfigured as exc:
        _fail(str(exc))
    except Exception as exc:  # Postgres away, tables missing: a message and exit 1, as for the reindex itself
        _fail(f"could not read the embedding space: {exc}")
    typer.echo(f"re-embedding with {embedder.provider}/{embedder.model} ({embedder.dimension} dims)")
    with typer.progressbar(length=1, label="chunks") as bar:
        state = {"done": 0}

        def progress(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - state["done"])
            state["done"] = done

        try:
            count = run_reindex(db.connection, embedder, batch_size=settings.embedding_batch_size, progress=progress)
        except ServiceNotConfigured as exc:
            _fail(str(exc))
        except Exception as exc:
            _fail(f"reindex stopped: {exc} (run `engram reindex` again to finish)")
    typer.echo(f"re-embedded {count} chunk(s); vector search is back on")


# ----------------------------------------------------------------------------------- keys, client


@app.command("create-key")
def create_key_command(tenant: Annotated[str, typer.Option(help="Tenant the key belongs to")] = "default") -> None:
    """Create an API key for a tenant (created if new); prints the key once."""
    from shared.auth import create_key
    from shared.db import connect

    _settings()
    with connect() as conn:
        key = create_key(conn, tenant, "cli")
        conn.commit()
    typer.echo(key)


UrlOpt = Annotated[str | None, typer.Option(help="Gateway URL (default http://ENGRAM_HOST:ENGRAM_PORT)")]
KeyOpt = Annotated[str | None, typer.Option(help="API key (default ENGRAM_API_KEY or the dev key)")]


def _say(client: EngramClient, session: str, user: str, text: str) -> None:
    from ops.client import EngramAPIError

    try:
        turn = client.submit_turn(session, user, text)
        typer.echo("engram> ", nl=False)
        for event in client.events(turn["turn_id"]):
            if event.event == "delta":
                typer.echo(event.data["text"], nl=False)
            elif event.event == "reset":
                typer.echo("\n(retrying) engram> ", nl=False)
            elif event.event == "tool_call":
                typer.secho(f"[{event.data['name']}…] ", nl=False, dim=True)
            elif event.event == "error":
                typer.secho(f"\nturn failed: {event.data.get('error')}", fg=typer.colors.RED)
        typer.echo("")
    except EngramAPIError as exc:
        typer.secho(f"request refused: {exc}", fg=typer.colors.RED, err=True)


def _connect_client(url: str | None, api_key: str | None) -> EngramClient:
    import httpx

    from ops.client import EngramClient

    settings = _settings()
    base, key = client_args(settings, url, api_key)
    client = EngramClient(base, key)
    try:
        client.http.get("/healthz").raise_for_status()
    except httpx.HTTPError:
        _fail(f"cannot reach engram at {base}: is `engram up` running?")
    return client


# Typed alone on a line, these end `engram chat` instead of being sent as a message.
QUIT_COMMANDS = frozenset({"/exit", "/quit"})


@app.command()
def chat(
    user: Annotated[str, typer.Option(help="Your user id")],
    session: Annotated[str | None, typer.Option(help="Session key (default: cli-<user>)")] = None,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Chat interactively with the running gateway (/exit, /quit, an empty line or Ctrl-D quits)."""
    client = _connect_client(url, api_key)
    session_key = session or f"cli-{user}"
    typer.echo(f"chatting as {user} in session {session_key}; /exit, /quit, an empty line or Ctrl-D quits")
    while True:
        try:
            text = input("you> ")
        except (EOFError, KeyboardInterrupt):
            typer.echo("")
            break
        if not text.strip() or text.strip().lower() in QUIT_COMMANDS:
            break
        _say(client, session_key, user, text)


DEMO_SCRIPT = (
    "Hi! My name is Alice and I live in Lisbon.",
    "What time is it?",
    "I prefer green tea over coffee, and call me Ali.",
    "What do you remember about me?",
)


@app.command()
def demo(
    user: Annotated[str, typer.Option(help="User id for the demo")] = "demo-alice",
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Run a short scripted conversation against the running gateway and print each reply."""
    client = _connect_client(url, api_key)
    session_key = f"demo-{int(time.time())}"
    typer.echo(f"demo: session {session_key} as user {user}")
    for index, text in enumerate(DEMO_SCRIPT):
        if index == len(DEMO_SCRIPT) - 1:
            _wait_for_memories(client, user, session_key)
        typer.echo(f"you> {text}")
        _say(client, session_key, user, text)


def _wait_for_memories(client: EngramClient, user: str, session_key: str, timeout: float = 60) -> None:
    """Extraction runs in the background a few seconds after the last turn: wait until the session's memory
    status says it is done (every message mined, every memory embedded), then count what the user has stored.

    Counting as soon as the first memory appeared (and only the `tacit` ones) said "1 memories" while the
    reply went on to list three: the user's name and city are stored under `entity/default`."""
    typer.secho("(waiting for background memory extraction…)", dim=True)
    status_url = f"/v1/users/{user}/sessions/{session_key}/memory-status"
    deadline = time.monotonic() + timeout
    status: dict[str, object] = {}
    while time.monotonic() < deadline:
        response = client.http.get(status_url)
        if response.status_code == 200:
            status = response.json()
            if status.get("idle"):
                break
        time.sleep(0.5)  # the status endpoint is polled (it has no long-poll); the condition is the real one
    else:
        typer.secho(f"(extraction not finished after {timeout:.0f}s; continuing)", dim=True)
    stored = client.http.get(f"/v1/users/{user}/memories", params={"limit": 500})
    if stored.status_code != 200:
        return
    total, created = len(stored.json()), status.get("memories_created", 0)
    earlier = f", {created} of them from this conversation" if created != total else ""
    typer.secho(f"({total} memories stored for {user}{earlier})", dim=True)


@app.command()
def context(
    user: Annotated[str, typer.Argument(help="User id")],
    session: Annotated[str, typer.Argument(help="Session key")],
    full: Annotated[bool, typer.Option(help="Print every section's text")] = False,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show what the model would see on the session's next request."""
    from ops.client import EngramAPIError

    client = _connect_client(url, api_key)
    try:
        view = client.session_context(session, user)
    except EngramAPIError as exc:
        _fail(str(exc))
    if not view.get("session_exists", True):
        typer.secho(
            f"{user} has no session {session!r} yet: this is what its first request would contain "
            f"(plus the first message); chat with `engram chat --user {user} --session {session}`",
            dim=True,
        )
    typer.echo(f"{view['model']}  persona: {view['persona_source']}  tokenizer: {view['tokenizer']}")
    for part in ("static", "dynamic"):
        typer.secho(f"\n{part} ({view['tokens'][part]} tokens)", bold=True)
        for section in view[part]:
            typer.echo(f"  {section['tokens']:>6}  {section['name']}")
            if full:
                typer.echo("        " + section["text"].replace("\n", "\n        "))
    typer.secho(f"\nmessages: {view['messages']} ({view['tokens']['messages']} tokens)", bold=True)
    typer.echo(f"pruning: {view['pruning']['summary'] or 'none'}")
    typer.secho("steering:", bold=True)
    for item in view["steering"] or [{"name": "none", "reason": "no generator fired"}]:
        typer.echo(f"  {item['name']}: {item['reason']}")
    if view["integrity_problems"]:
        typer.secho("integrity problems: " + "; ".join(view["integrity_problems"]), fg=typer.colors.RED)


# -------------------------------------------------------------------------------------------- mcp


@app.command()
def mcp(
    user: Annotated[str | None, typer.Option(help="The engram user (not needed with a key bound to one user)")] = None,
    url: Annotated[
        str | None, typer.Option(help="The gateway's MCP endpoint (default http://ENGRAM_HOST:ENGRAM_PORT/mcp)")
    ] = None,
    api_key: KeyOpt = None,
) -> None:
    """Serve engram's MCP tools over stdio (for Claude Desktop, Cursor, ...), forwarding to the gateway."""
    import anyio

    from ops.mcp_stdio import GatewayRefused, serve

    settings = _settings()
    base, key = client_args(settings, None, api_key)
    endpoint = url or f"{base.rstrip('/')}/mcp"
    user = user or os.environ.get("ENGRAM_USER")
    try:
        anyio.run(serve, endpoint, key, user)
    except GatewayRefused as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        pass


# ----------------------------------------------------------------------------------------- doctor


@app.command()
def doctor() -> None:
    """Check database, pgvector, Redis, workers and provider config; say how to fix what is wrong."""
    from ops.doctor import run_checks

    settings = _settings()
    failures = 0
    for check in run_checks(settings):
        mark = typer.style("ok  ", fg=typer.colors.GREEN) if check.ok else typer.style("FAIL", fg=typer.colors.RED)
        typer.echo(f"{mark} {check.name}: {check.detail}")
        if not check.ok:
            failures += 1
            if check.fix:
                typer.echo(f"     fix: {check.fix}")
    if failures:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover - `python -m ops.cli`
    app()
