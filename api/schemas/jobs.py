"""Schemas of the maintenance jobs' admin view (`GET /v1/admin/jobs`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class JobRunOut(BaseModel):
    period: str = Field(description="The day (YYYY-MM-DD) or ISO week (YYYY-Www) the run belongs to")
    status: str = Field(description="running, done or failed")
    as_of: datetime = Field(description="The clock the run worked with")
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None
    attempts: int = Field(description="1, plus one per resume after a kill or a failure")
    changed: int = Field(description="Memories the run created, superseded or removed")
    counts: dict[str, int]
    details: dict[str, Any] = Field(description="e.g. tenants stopped by the background token budget, and why")
    error: str | None


class JobOut(BaseModel):
    name: str
    summary: str
    cadence: str = Field(description="daily or weekly: how long a period is")
    schedule: str = Field(description="Cron expression (minute hour day-of-month month day-of-week)")
    timezone: str
    enabled: bool
    last_run: JobRunOut | None = Field(description="The latest run over all users")
    next_run: datetime | None = Field(description="When beat fires it next (null when disabled)")
