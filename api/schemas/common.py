"""What every area's schemas share: the base of request bodies, ids, ISO-8601 timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict

from shared.text import SAFE_TEXT


class RequestBody(BaseModel):
    """The base of every JSON request body (and of the objects inside one): a field the schema does not name is
    refused, and so is a value of another JSON type than the schema's (`0.0` for a boolean, `"5"` for an
    integer, `1` for a boolean): strict mode, where pydantic's default would coerce them. A JSON integer is
    still a valid number, and a `Timestamp` parses from its ISO-8601 text."""

    model_config = ConfigDict(extra="forbid", strict=True)


ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$"
MAX_NAME_CHARS = 128
# A speaker's name as a conversation gives it ("Alice", "Dr. Ng"): shown as the speaker of a message.
SpeakerName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), SAFE_TEXT]


def _iso_text_only(value: Any) -> Any:
    # pydantic's lax mode reads a number as Unix seconds; the schema says an ISO-8601 string, so only
    # a string (or an already-parsed datetime) is accepted.
    if isinstance(value, str | datetime):
        return value
    raise ValueError("must be an ISO-8601 date-time string, e.g. 2026-05-01T09:00:00Z")


def _representable(value: datetime) -> datetime:
    # Postgres stores 0001-01-01T00:00+01:00 as a date before year 1 (1 BC), which Python cannot read
    # back: every later read of the row would fail. Refuse a time whose UTC is outside years 1-9999.
    try:
        if value.tzinfo is not None:
            value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the time in UTC must lie within the years 1 to 9999") from exc
    return value


# Strict(False): a JSON body carries a time as text, which strict mode would refuse for a datetime.
Timestamp = Annotated[datetime, Strict(False), BeforeValidator(_iso_text_only), AfterValidator(_representable)]
