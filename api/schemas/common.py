"""Types every area's schemas share: ids, ISO-8601 timestamps."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$"


def _iso_text_only(value: Any) -> Any:
    # pydantic's lax mode reads a number as Unix seconds; the schema says an ISO-8601 string, so only
    # a string (or an already-parsed datetime) is accepted.
    if isinstance(value, str | datetime):
        return value
    raise ValueError("must be an ISO-8601 date-time string, e.g. 2026-05-01T09:00:00Z")


Timestamp = Annotated[datetime, BeforeValidator(_iso_text_only)]
