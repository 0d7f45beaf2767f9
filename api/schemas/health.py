"""Bodies of the health endpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, str]
    failing: list[str] = Field(default_factory=list)
