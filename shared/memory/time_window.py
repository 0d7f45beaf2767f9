"""The time a question names ("last May", "in 2023", "two weeks ago", "yesterday"), as a window of time.

`dateparser` finds and resolves the phrases, against the moment the question is asked (`as_of`), preferring
the past (a memory question is about what was said); its period (day, week, month, year) sets the window's
width. Its search also reads ordinary words as dates ("we", the modal "may", "18th" of a birthday), so a
phrase counts only when it names a time outright: a year, a month name (a capitalised "May", or one next to
a number), or a relative day or span (yesterday, today, "… ago", "last week"). A bare weekday is left out:
which one is meant depends on more than the phrase. When several phrases count, the narrowest one wins.

A cheap test (`may_name_time`) keeps the parser off the many queries that name no time at all, and the
commonest cue in chat, a lone "today", "tonight" or "yesterday", is read without it (`_lone_day`): the
parser costs about 2 ms of CPU a query, paid on every turn that says "today".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

_MONTHS = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|jun(?:e)?|jul(?:y)?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_YEAR = r"\b(?:19|20)\d\d\b"
_RELATIVE = (
    r"\b(?:yesterday|today|tonight|ago|(?:last|past|previous|this|next)\s+(?:week|weekend|month|year|"
    r"spring|summer|autumn|fall|winter))\b"
)
# A phrase that names a time outright; "May" only capitalised or beside a number.
_NAMES_TIME = re.compile(
    rf"{_YEAR}|\b(?:{_MONTHS})\b|\bMay\b|\bmay\s+\d|\d\s+may\b|{_RELATIVE}",
    re.IGNORECASE,
)
_CAPITAL_MAY_ONLY = re.compile(r"\bmay\b")
# Days back from the moment asked, for a cue that names one day on its own.
_LONE_DAYS = {"today": 0, "tonight": 0, "yesterday": 1}
# Words that move a day cue ("the day before yesterday", "two days after today"): the parser reads those.
_SHIFTED = re.compile(r"\b(?:before|after|from|since|until|till)\b", re.IGNORECASE)
# The widths dateparser's periods stand for, narrowest first.
_PERIOD_ORDER = ("day", "week", "month", "year")


@dataclass(frozen=True)
class TimeWindow:
    start: datetime  # inclusive
    end: datetime  # exclusive
    phrase: str
    period: str


def may_name_time(query: str) -> bool:
    return _NAMES_TIME.search(query) is not None


def _names_time(phrase: str) -> bool:
    """The phrase names a time outright; lower-case "may" alone is the verb."""
    stripped = _CAPITAL_MAY_ONLY.sub("", phrase) if not re.search(r"\d", phrase) else phrase
    return _NAMES_TIME.search(stripped) is not None


@lru_cache(maxsize=1)
def _parsers() -> tuple[Any, Any]:
    from dateparser.date import DateDataParser
    from dateparser.search import search_dates

    return search_dates, DateDataParser


def _window(moment: datetime, period: str) -> tuple[datetime, datetime]:
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if period == "year":
        start = moment.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        return start, start.replace(year=start.year + 1)
    if period == "month":
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = (start + timedelta(days=32)).replace(day=1)
        return start, following
    start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":  # "two weeks ago", "last week": the days around the resolved one
        return start - timedelta(days=3), start + timedelta(days=4)
    return start, start + timedelta(days=1)


def _lone_day(query: str, as_of: datetime) -> TimeWindow | None:
    """The day of a query whose only time cue is "today", "tonight" or "yesterday", nothing shifting it: what
    the parser answers for it (a day period; "today at 5pm" is that day too), without the parser."""
    cues = [match.group(0) for match in _NAMES_TIME.finditer(query)]
    if len(cues) != 1 or (days := _LONE_DAYS.get(cues[0].lower())) is None or _SHIFTED.search(query):
        return None
    start, end = _window(as_of - timedelta(days=days), "day")
    return TimeWindow(start, end, cues[0], "day")


def time_window(query: str, as_of: datetime | None = None) -> TimeWindow | None:
    """The window of time `query` names, resolved against `as_of` (default now), or None."""
    if not may_name_time(query):
        return None
    asked = (as_of or datetime.now(UTC)).astimezone(UTC)
    if lone := _lone_day(query, asked):
        return lone
    base = asked.replace(tzinfo=None)
    settings = {"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False}
    search_dates, date_data_parser = _parsers()
    found = search_dates(query, languages=["en"], settings=settings) or []
    parser = date_data_parser(languages=["en"], settings=settings)
    windows = []
    for phrase, _ in found:
        if not _names_time(phrase):
            continue
        data = parser.get_date_data(phrase)
        if data.date_obj is None or data.period not in _PERIOD_ORDER:
            continue
        start, end = _window(data.date_obj.replace(tzinfo=UTC), data.period)
        windows.append(TimeWindow(start, end, phrase.strip(), data.period))
    if not windows:
        return None
    return min(windows, key=lambda w: (_PERIOD_ORDER.index(w.period), -len(w.phrase)))
