"""A Celery command whose schedule clock runs ahead of the machine's:
`python -m tests.support.shifted_clock --offset SECONDS celery -A workers.app beat ...`, or `--lead SECONDS`
for a clock that, when the process first reads it, is that many seconds before a whole minute.

Cron fires on whole minutes, so a test of beat would wait up to a minute for each fire. Shifting the clock
beat reads its schedules by (Celery.now: crontab, RedBeat's due times and last-run times all read it) puts
the next minute a few seconds away instead; `--lead` measures from the first reading, so however long the
process took to start, its first minute comes that long after it set up its schedule. The shift is printed
(`shifted clock: S s ahead`) for a test to start another process relative to it. Two beats shifted by
different amounts are two machines whose clocks disagree, which a deployment with one beat per machine has
anyway. Only the schedule's clock moves: sleeps, lock expiry (timed by Redis) and log timestamps keep the
real time.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta

from celery import Celery

SHIFT_LINE = re.compile(r"shifted clock: (\d+(?:\.\d+)?) s ahead")


def shifted_argv(argv: list[str], *, offset: float | None = None, lead: float | None = None) -> list[str]:
    """`argv` (`python -m celery ...`, as ops/process_commands.py builds it) run through this module."""
    python, flag, module, *rest = argv
    if (flag, module) != ("-m", "celery"):
        raise ValueError(f"not a `python -m celery` command: {argv}")
    if (offset is None) == (lead is None):
        raise ValueError("give one of offset and lead")
    option = ["--offset", repr(offset)] if offset is not None else ["--lead", repr(lead)]
    return [python, "-m", __name__, *option, *rest]


def shift(offset: float | None, lead: float | None) -> None:
    real_now = Celery.now
    ahead: list[timedelta] = []

    def now(self: Celery) -> datetime:
        real = real_now(self)
        if not ahead:
            seconds = offset if offset is not None else (-(real.second + real.microsecond / 1e6 + (lead or 0))) % 60
            ahead.append(timedelta(seconds=seconds))
            print(f"shifted clock: {seconds:.6f} s ahead", file=sys.stderr, flush=True)
        return real + ahead[0]

    Celery.now = now  # type: ignore[method-assign]


def main() -> None:
    option, value, *command = sys.argv[1:]
    if option not in ("--offset", "--lead"):
        raise SystemExit(f"usage: python -m {__name__} --offset|--lead SECONDS celery ARGS...")
    shift(float(value) if option == "--offset" else None, float(value) if option == "--lead" else None)
    sys.argv = ["celery", *command]
    from celery.__main__ import main as celery_main

    celery_main()


if __name__ == "__main__":
    main()
