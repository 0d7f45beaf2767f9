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
from ops.chat_cli import chat, context, demo
from ops.cli_support import KeyOpt, client_args, fail, load_settings
from ops.import_cli import import_command
from ops.jobs_cli import jobs_app
from ops.keys_cli import keys_app
from ops.secrets_cli import secrets_app

if TYPE_CHECKING:  # the HTTP client loads only for the commands that talk to the gateway
    from shared.infra.config import Settings
    from shared.infra.db import Conn

app = typer.Typer(help="engram: durable, automatic memory for chat agents.", no_args_is_help=True, add_completion=False)
app.add_typer(keys_app, name="keys")
app.command("import")(import_command)
app.add_typer(jobs_app, name="jobs")
app.add_typer(channels_app, name="channels")
app.add_typer(users_app, name="users")
app.add_typer(secrets_app, name="secrets")
# Commands that talk to a running gateway as a user would (ops/chat_cli.py).
app.command()(chat)
app.command()(demo)
app.command()(context)


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
    from shared.infra.db import connect
    from shared.infra.migrate import SchemaTooNew, apply_migrations, check_schema_known, pending_migrations
    from shared.infra.secretbox import SecretKeyError, key_file
    from shared.infra.services import ServiceNotConfigured

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
                from shared.access.auth import DEFAULT_TENANT, ensure_tenant, register_key

                conn.autocommit = False
                register_key(conn, ensure_tenant(conn, DEFAULT_TENANT), settings.dev_api_key.get_secret_value(), "dev")
                conn.commit()
            if settings.metrics_api_key is not None:
                # Prometheus's key in docker-compose / Kubernetes: the `metrics` scope and nothing else.
                from shared.access.auth import DEFAULT_TENANT, ensure_tenant, register_key

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
    from shared.infra.secretbox import SecretKeyMissing

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
    from shared.embeddings import current_space
    from shared.embeddings import reindex as run_reindex
    from shared.embeddings.providers import embedder_from_settings
    from shared.embeddings.space import follow_recorded_space
    from shared.infra import db
    from shared.infra.services import ServiceNotConfigured

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
    from shared.access.auth import create_key
    from shared.infra.db import connect

    _settings()
    with connect() as conn:
        key = create_key(conn, tenant, "cli")
        conn.commit()
    typer.echo(key)


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
