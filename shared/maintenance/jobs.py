"""Job name → the function that runs it, and the one entry point every caller uses (beat tasks, the CLI)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.infra.config import Settings
from shared.infra.db import Conn
from shared.maintenance import cache_eviction, consolidation, decay, enrichment, reflection
from shared.maintenance.runs import JobFunction, RunResult, UserRef, last_runs, run_job, run_summary
from shared.maintenance.schedule import JOBS, cron_of, enabled, next_run, spec_of

FUNCTIONS: dict[str, JobFunction] = {
    "decay": decay.run,
    "cache-eviction": cache_eviction.run,
    "reflection": reflection.run,
    "consolidation": consolidation.run,
    "enrichment": enrichment.run,
}


def run(
    name: str,
    settings: Settings,
    *,
    as_of: datetime | None = None,
    user: UserRef | None = None,
    slice_seconds: float | None = None,
    provider: Any = None,
) -> RunResult:
    spec_of(name)  # UnknownJob for a bad name
    return run_job(
        name, FUNCTIONS[name], settings, as_of=as_of, user=user, slice_seconds=slice_seconds, provider=provider
    )


def overview(conn: Conn, settings: Settings, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every job: schedule, enabled, its last all-users run and when beat fires it next."""
    now = now or datetime.now(UTC)
    last = last_runs(conn, list(JOBS))
    return [
        {
            "name": name,
            "summary": spec.summary,
            "cadence": spec.cadence,
            "schedule": cron_of(settings, name),
            "timezone": settings.jobs_timezone,
            "enabled": enabled(settings, name),
            "last_run": run_summary(last.get(name)),
            "next_run": next_run(settings, name, now),
        }
        for name, spec in JOBS.items()
    ]
