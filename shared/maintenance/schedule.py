"""Which jobs exist, when they run, and which period a run belongs to.

Schedules are 5-field cron expressions (minute, hour, day of month, month, day of week with 0 or 7 =
Sunday) read in `ENGRAM_JOBS_TIMEZONE`. Beat fires them through Celery's crontab (same syntax); this
module parses them itself too, to validate settings and to tell `engram jobs list` and the admin API
when each job runs next, without loading Celery.

A period is the unit a job runs once in: the calendar day (in the jobs' time zone) for daily jobs, the
ISO week for the weekly reflection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from shared.infra.config import Settings
from shared.infra.cron import parse_cron
from shared.queueing import task_names

Cadence = Literal["daily", "weekly"]


@dataclass(frozen=True)
class JobSpec:
    name: str
    cadence: Cadence
    task: str  # the Celery task beat sends
    summary: str

    @property
    def setting(self) -> str:
        return self.name.replace("-", "_")


JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            "enrichment",
            "daily",
            task_names.JOB_ENRICHMENT,
            "re-extract entities of memories with few of them with the accurate extractor",
        ),
        JobSpec(
            "consolidation",
            "daily",
            task_names.JOB_CONSOLIDATION,
            "turn unconsolidated sessions into durable facts, dedup and supersede contradictions",
        ),
        JobSpec(
            "decay",
            "daily",
            task_names.JOB_DECAY,
            "lower confidence of unused memories; soft-delete the faded; expire one-off style observations",
        ),
        JobSpec(
            "reflection",
            "weekly",
            task_names.JOB_REFLECTION,
            "one weekly reflection per user with >= 3 new facts in 7 days",
        ),
        JobSpec(
            "cache-eviction",
            "daily",
            task_names.JOB_CACHE_EVICTION,
            "drop embedding-cache entries unused for ENGRAM_EMBEDDING_CACHE_MAX_IDLE_DAYS",
        ),
    )
}


class UnknownJob(ValueError):
    pass


def spec_of(name: str) -> JobSpec:
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJob(f"unknown job {name!r}; jobs: {', '.join(JOBS)}") from None


def cron_of(settings: Settings, name: str) -> str:
    return str(getattr(settings, f"job_{spec_of(name).setting}_schedule"))


def enabled(settings: Settings, name: str) -> bool:
    return bool(getattr(settings, f"job_{spec_of(name).setting}_enabled"))


def timezone(settings: Settings) -> ZoneInfo:
    return ZoneInfo(settings.jobs_timezone)


def period_of(name: str, as_of: datetime, tz: ZoneInfo) -> str:
    local = as_of.astimezone(tz)
    if spec_of(name).cadence == "weekly":
        year, week, _ = local.isocalendar()
        return f"{year}-W{week:02d}"
    return local.date().isoformat()


def next_run(settings: Settings, name: str, after: datetime) -> datetime | None:
    """When beat fires the job next (UTC), or None when it is disabled."""
    if not enabled(settings, name):
        return None
    tz = timezone(settings)
    return parse_cron(cron_of(settings, name)).next_after(after.astimezone(tz)).astimezone(ZoneInfo("UTC"))
