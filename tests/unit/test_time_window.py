"""The time a question names, read against when it is asked (dateparser behind a filter of what names a time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.memory import time_window as time_window_module
from shared.memory.time_window import time_window

ASKED = datetime(2023, 10, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did I say last May?", datetime(2023, 5, 1), datetime(2023, 6, 1)),
        ("What did Melanie paint in 2022?", datetime(2022, 1, 1), datetime(2023, 1, 1)),
        ("Where did she go in June 2023?", datetime(2023, 6, 1), datetime(2023, 7, 1)),
        ("what did we talk about yesterday", datetime(2023, 9, 30), datetime(2023, 10, 1)),
        ("What happened two weeks ago?", datetime(2023, 9, 14), datetime(2023, 9, 21)),
        ("What did I do last year?", datetime(2022, 1, 1), datetime(2023, 1, 1)),
        ("What did we decide on 8 May 2023?", datetime(2023, 5, 8), datetime(2023, 5, 9)),
    ],
)
def test_a_named_time_is_a_window_read_against_when_the_question_is_asked(
    query: str, start: datetime, end: datetime
) -> None:
    window = time_window(query, ASKED)
    assert window is not None
    assert (window.start, window.end) == (start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the LGBTQ support group?",  # asks for a time, names none
        "What may I do now?",  # the verb "may", and "now" is no window
        "How long ago was Caroline's 18th birthday?",  # an ordinal is not a date
        "What did we talk about on Sunday?",  # a bare weekday: which one is not in the phrase
        "What does she think of us?",
    ],
)
def test_words_that_only_look_like_times_name_none(query: str) -> None:
    assert time_window(query, ASKED) is None


def test_without_a_moment_the_question_is_read_as_asked_now() -> None:
    window = time_window("What did I say last year?")
    assert window is not None and window.end.year == datetime.now(UTC).year


@pytest.mark.parametrize(
    "query",
    [
        "my lucky number today is 304",
        "What did I do yesterday?",
        "see you TONIGHT",
        "today at 5pm",
        "yesterday morning",
        "by noon today",
        "the day before yesterday",
        "2 days after today",
        "since yesterday",
        "today, last week",
        "today and yesterday",
        "Yesterday in May",
    ],
)
def test_a_lone_day_cue_is_read_as_the_parser_reads_it(query: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Late evening west of UTC: the day is the UTC day of the moment asked, as the parser's.
    asked = datetime(2024, 3, 10, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    quick = time_window(query, asked)
    monkeypatch.setattr(time_window_module, "_lone_day", lambda query, as_of: None)
    parsed = time_window(query, asked)
    assert quick is not None and parsed is not None
    assert (quick.start, quick.end, quick.period) == (parsed.start, parsed.end, parsed.period)
