"""`engram jobs list|run`: the maintenance jobs, straight against the database and Redis (no gateway needed).

`engram jobs run NAME` runs the job in this process, as beat's task would (same job_runs bookkeeping,
so a period that already ran is a no-op and a killed run resumes). With --json the last line is one
JSON object: {"job", "period", "changed", "status", ...counts}.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ops.cli_support import fail, load_settings

jobs_app = typer.Typer(help="List and run the maintenance jobs (decay, consolidation, …).", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (for run: one object, as the last line)")]


def _when(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return str(value)


def _parse_as_of(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--as-of {text!r} is not an ISO-8601 date or time (e.g. 2027-04-10 or 2027-04-10T04:00:00Z)", 2)
    # A date or a time without a zone is read as UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@jobs_app.command("list")
def list_jobs(as_json: JsonOption = False) -> None:
    """Each job: schedule, enabled, last run and next run."""
    from shared.infra import db
    from shared.infra.services import ServiceNotConfigured
    from shared.maintenance.jobs import overview

    settings = load_settings()
    try:
        with db.connection() as conn:
            jobs = overview(conn, settings)
    except (ServiceNotConfigured, db.DatabaseUnavailable) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(jobs, default=str))
        return
    typer.echo(f"{'job':<15} {'schedule':<12} {'enabled':<8} {'last run':<42} next run")
    for job in jobs:
        last = job["last_run"]
        last_text = (
            f"{last['period']} {last['status']} {_when(last['started_at'])}"
            + (
                f" ({last['duration_seconds']:.1f} s, changed {last['changed']})"
                if last["duration_seconds"] is not None
                else ""
            )
            if last
            else "never"
        )
        typer.echo(
            f"{job['name']:<15} {job['schedule']:<12} {'yes' if job['enabled'] else 'no':<8} {last_text:<42} "
            f"{_when(job['next_run'])}"
        )
    typer.echo(f"(schedules in {settings.jobs_timezone})")


@jobs_app.command("run")
def run_job(
    name: Annotated[str, typer.Argument(help="decay, consolidation, enrichment, reflection or cache-eviction")],
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Run as if the clock were here (ISO-8601; default now)")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user (external id)")] = None,
    tenant: Annotated[str, typer.Option(help="The --user's tenant (by name)")] = "default",
    as_json: JsonOption = False,
) -> None:
    """Run one job now (a period that already ran is a no-op: "changed": 0)."""
    from shared.infra import db
    from shared.infra.services import ServiceNotConfigured
    from shared.maintenance import jobs
    from shared.maintenance.runs import JobUserNotFound, resolve_user
    from shared.maintenance.schedule import UnknownJob, spec_of

    settings = load_settings()
    try:
        spec_of(name)
    except UnknownJob as exc:
        fail(str(exc), 2)
    clock = _parse_as_of(as_of)
    try:
        target = None
        if user is not None:
            with db.connection() as conn:
                target = resolve_user(conn, tenant, user)
        result = jobs.run(name, settings, as_of=clock, user=target)
    except JobUserNotFound as exc:
        fail(str(exc))
    except (ServiceNotConfigured, db.DatabaseUnavailable) as exc:
        fail(str(exc))
    except Exception as exc:
        fail(f"{name} failed: {type(exc).__name__}: {exc} (run it again to resume)")
    _embed_later(result.to_embed)
    body = result.as_json()
    if as_json:
        typer.echo(json.dumps(body, default=str))
    else:
        note = " (this period already ran)" if result.already_ran else ""
        typer.echo(f"{name} {result.period}: {result.status}{note}, changed {result.changed}")
        for key, value in sorted(result.counts.items()):
            typer.echo(f"  {key}: {value}")
    if result.status == "busy":
        raise typer.Exit(3)


def _embed_later(memory_ids: list[int]) -> None:
    """Memories the run wrote are embedded by the workers; with no broker the index sweep does it later."""
    if not memory_ids:
        return
    try:
        from workers.dispatch import enqueue_embed_memory

        for memory_id in memory_ids:
            enqueue_embed_memory(memory_id)
    except Exception as exc:
        typer.secho(f"note: could not queue embeddings ({exc}); the index sweep will", err=True, dim=True)
