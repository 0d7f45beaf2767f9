"""5-field cron expressions (minute, hour, day of month, month, day of week with 0 or 7 = Sunday), parsed
as Celery's crontab reads them.

A leaf module: the settings validate the job schedules with it (shared/infra/config.py) and the job table says
when each job runs next (shared/maintenance/schedule.py), without either importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_NAMES = {
    4: {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
    3: {
        m: i + 1
        for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))
    },
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday

    def matches_day(self, day: datetime) -> bool:
        # Celery's crontab requires day of month AND day of week to match (classic cron ORs them when
        # both are restricted); beat is Celery, so this follows Celery.
        return day.day in self.days and day.month in self.months and (day.isoweekday() % 7) in self.weekdays

    def next_after(self, moment: datetime) -> datetime:
        """The first scheduled minute strictly after `moment` (aware; the answer is in its time zone)."""
        start = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for offset in range(0, 366 * 5):
            day = (start + timedelta(days=offset)).replace(hour=0, minute=0)
            if not self.matches_day(day):
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    candidate = day.replace(hour=hour, minute=minute)
                    if candidate >= start:
                        return candidate
        raise ValueError("the schedule never fires")


def _value(text: str, index: int) -> int:
    names = _NAMES.get(index, {})
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise ValueError(f"{_FIELD_NAMES[index]}: {text!r} is not a number")
    return int(text)


def _field(text: str, index: int) -> frozenset[int]:
    low, high = _RANGES[index]
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"{_FIELD_NAMES[index]}: bad step in {part!r}")
            step = int(step_text)
        if body == "*":
            first, last = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            first, last = _value(a, index), _value(b, index)
        else:
            first = _value(body, index)
            last = high if step_text else first
        if not (low <= first <= high and low <= last <= high and first <= last):
            raise ValueError(f"{_FIELD_NAMES[index]}: {part!r} is outside {low}-{high}")
        values.update(range(first, last + 1, step))
    if index == 4 and 7 in values:  # 7 is Sunday too
        values = (values - {7}) | {0}
    return frozenset(values)


def parse_cron(expression: str) -> Cron:
    """A 5-field cron expression; ValueError naming the bad field."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"cron schedule {expression!r} needs 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    parsed = [_field(text, index) for index, text in enumerate(fields)]
    return Cron(*parsed)
