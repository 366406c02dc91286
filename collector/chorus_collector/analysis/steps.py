"""A series' step and the grid of its points.

Every grid is aligned to the Unix epoch, so the same step always cuts time at the same
instants whatever window is asked: a point of ``step`` seconds starts at a multiple of
``step``; a day at 00:00 UTC (a multiple of 86,400 s: Unix time has no leap seconds); an ISO
week on Monday 00:00 UTC (the epoch was a Thursday, so weeks start 4 days past a multiple of
604,800 s). A point is a whole number of the campaign's time buckets, so each point is a
window the estimates route answers: a step must be a multiple of the time precision, and
days and weeks need a precision that divides 86,400 s (then every day and every Monday
starts a bucket).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chorus_collector.problems import Problem

__all__ = ["DAY", "MAX_POINTS", "WEEK", "Step", "parse_step", "points"]

DAY = 86_400
WEEK = 7 * DAY
_MONDAY = 4 * DAY  # 1970-01-05, the first Monday after the epoch
#: A series has at most this many points: the query's cost and answer stay bounded.
MAX_POINTS = 1_000
MAX_STEP = 10 * 366 * DAY  # ten years: a longer point is a whole window, not a series
_SECONDS = re.compile(r"([0-9]{1,10})s?")


@dataclass(frozen=True)
class Step:
    seconds: int
    name: str  # "bucket", "day", "week" or "<n>s"
    origin: int = 0  # points start at origin + k · seconds

    def floor(self, time: int) -> int:
        return time - (time - self.origin) % self.seconds

    def ceil(self, time: int) -> int:
        return self.floor(time + self.seconds - 1)


def parse_step(step: int | str, precision: int) -> Step:
    """The step a query names, checked against the campaign's time precision."""
    if isinstance(step, bool):
        raise Problem("invalid-query", _STEP_HELP)
    if step == "bucket":
        return Step(precision, "bucket")
    if step in ("day", "week"):
        if DAY % precision:
            raise Problem("invalid-query",
                          f"step={step} needs a time precision that divides a day (86400 s); "
                          f"this campaign's is {precision} s, so a day would cut a time "
                          f"bucket in two: use a multiple of {precision} s")
        return Step(DAY, "day") if step == "day" else Step(WEEK, "week", _MONDAY)
    if isinstance(step, str):
        match = _SECONDS.fullmatch(step)
        if match is None:
            raise Problem("invalid-query", _STEP_HELP)
        step = int(match.group(1))
    if not isinstance(step, int) or not 0 < step <= MAX_STEP:
        raise Problem("invalid-query", _STEP_HELP)
    if step % precision:
        lower = max(precision, step - step % precision)
        raise Problem("invalid-query",
                      f"step = {step} s is not a multiple of the time precision ({precision} s):"
                      f" a point must be whole time buckets; use {lower} or {lower + precision}")
    return Step(step, "bucket" if step == precision else f"{step}s")


_STEP_HELP = ('step must be "bucket", "day", "week" or a whole number of seconds (e.g. 3600 '
              f'or "3600s", at most {MAX_STEP}) that is a multiple of the time precision')


def points(step: Step, start: int, end: int) -> list[tuple[int, int]]:
    """The grid's intervals intersected with [start, end): the first and last may be
    partial when the window does not fall on the grid. Refuses more than MAX_POINTS."""
    first = step.floor(start)
    count = -(-(end - first) // step.seconds)
    if count > MAX_POINTS:
        raise Problem("too-many-points",
                      f"{count} points of {step.seconds} s from {start} to {end}; a series has "
                      f"at most {MAX_POINTS}: use a longer step or a shorter window")
    return [(max(start, first + i * step.seconds), min(end, first + (i + 1) * step.seconds))
            for i in range(count)]
