"""Time windows on the command line: ``--start``/``--end`` as ISO 8601 or Unix seconds,
``--last`` as a duration, aligned to a campaign's time precision.

For every command that reads a window (``chorus estimates``, and the series and comparison
commands)::

    @window_options
    def command(name: str, start: int | None, end: int | None, last: int | None, ...) -> None:
        window = requested_window(start, end, last)       # refuses --last with --start/--end
        window = campaign_window(api, name, window)       # aligned; says so on stderr

Instants are parsed by the standard library (``datetime.fromisoformat`` reads every ISO 8601
form an analyst types, offsets and ``Z`` included, since Python 3.11). Durations are the few
forms a window needs (``7d``, ``24h``, ``90m``, ``2w``, ``P7D``, ``PT12H``, ``P1DT12H``), read
by one regular expression each: the ISO parsers on PyPI would add a dependency only to accept
years and months, which have no fixed length and which a window in seconds must refuse anyway.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from chorus_client.api import CollectorAPI
from chorus_collector.cli.common import call_collector
from chorus_collector.results.tables import describe_window, format_instant

__all__ = ["DURATION", "INSTANT", "Duration", "Instant", "Window", "campaign_window",
           "parse_duration", "parse_instant", "requested_window", "window_options"]

INSTANT_FORMS = ("an ISO 8601 date (2026-11-01) or date-time (2026-11-01T12:00, "
                 "2026-11-01T12:00:00Z, 2026-11-01T12:00+02:00), or Unix seconds (1793491200)")
DURATION_FORMS = ("a number and a unit (90m, 24h, 7d, 2w; also s) or an ISO 8601 duration "
                  "(PT90M, PT12H, P7D, P1DT12H, P2W)")

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_NUMBER = r"(\d+(?:[.,]\d+)?)"
# "1d12h" too: the parts in decreasing order, each at most once.
_SHORT = re.compile("".join(rf"(?:{_NUMBER}{unit})?" for unit in "wdhms"), re.IGNORECASE)
_ISO = re.compile(rf"P(?:{_NUMBER}W)?(?:{_NUMBER}D)?"
                  rf"(?:T(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?", re.IGNORECASE)
_ISO_CALENDAR = re.compile(r"P(?:\d+(?:[.,]\d+)?Y)|P[^T]*\d(?:[.,]\d+)?M", re.IGNORECASE)


def parse_instant(text: str) -> int:
    """Unix seconds from ISO 8601 (a date, or a date-time without an offset, means UTC) or
    from Unix seconds (digits only). A fraction of a second is dropped.

    >>> parse_instant("2026-11-01"), parse_instant("2026-11-01T01:00+01:00")
    (1793491200, 1793491200)
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use {INSTANT_FORMS}; a date or a time "
                         "without an offset is UTC") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return math.floor(moment.timestamp())


def parse_duration(text: str) -> int:
    """Whole seconds (rounded down) from ``90m``, ``24h``, ``7d``, ``2w``, ``1d12h`` or an
    ISO 8601 duration without years or months (``PT90M``, ``P7D``, ``P1DT12H``, ``P2W``).

    >>> parse_duration("7d"), parse_duration("PT12H"), parse_duration("1d12h")
    (604800, 43200, 129600)
    """
    text = text.strip()
    if _ISO_CALENDAR.match(text):
        raise ValueError(f"{text!r}: years and months have no fixed length; say it in weeks or "
                         "days (P4W, P30D)")
    for pattern, units in ((_ISO, "wdhms"), (_SHORT, "wdhms")):
        match = pattern.fullmatch(text)
        if match and any(match.groups()) and not text.upper().endswith("T"):
            seconds = sum(float(number.replace(",", ".")) * _UNIT_SECONDS[unit]
                          for number, unit in zip(match.groups(), units, strict=True)
                          if number is not None)
            if seconds < 1:
                raise ValueError(f"{text!r}: a window lasts at least a second")
            return math.floor(seconds)
    raise ValueError(f"{text!r} is not a duration: use {DURATION_FORMS}")


if TYPE_CHECKING:
    _SecondsParam = click.ParamType[int]
else:  # generic only from click 8.4 on; the project allows 8.1
    _SecondsParam = click.ParamType


class Instant(_SecondsParam):
    """A click parameter for ``parse_instant``: Unix seconds."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_instant(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class Duration(_SecondsParam):
    """A click parameter for ``parse_duration``: seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


INSTANT = Instant()
DURATION = Duration()


@dataclass(frozen=True)
class Window:
    """A time window in Unix seconds, end excluded; ``None`` is unbounded on that side."""

    start: int | None = None
    end: int | None = None

    def aligned(self, precision: int) -> Window:
        """Start rounded down and end rounded up to a multiple of ``precision`` seconds:
        the smallest window of whole time buckets that holds this one."""
        return Window(None if self.start is None else self.start // precision * precision,
                      None if self.end is None else -(-self.end // precision) * precision)

    def describe(self) -> str:
        return describe_window({"start": self.start, "end": self.end})


def requested_window(start: int | None, end: int | None, last: int | None, *,
                     now: float | None = None) -> Window:
    """The window the options ask for, before alignment: ``--last D`` is [now − D, now)."""
    if last is not None:
        if start is not None or end is not None:
            raise click.UsageError("--last cannot be combined with --start or --end: "
                                   "give either a duration or the window's bounds")
        moment = math.floor(time.time() if now is None else now)
        return Window(max(0, moment - last), moment)  # nothing is older than 1970
    if start is not None and end is not None and end <= start:
        raise click.UsageError(f"--end ({format_instant(end)}) must be after --start "
                               f"({format_instant(start)})")
    return Window(start, end)


def campaign_window(api: CollectorAPI, name: str, window: Window, *,
                    label: str = "window") -> Window:
    """``window`` aligned to the campaign's time precision (the collector refuses a bound
    that is not a multiple of it), fetched from the campaign's config; says on stderr when a
    bound moved (``label`` names the window there). A window on all data is returned as it
    is, without a call."""
    if window.start is None and window.end is None:
        return window
    config = call_collector(lambda: api.get_campaign(name))
    precision = int(config["time_precision"])
    aligned = window.aligned(precision)
    if aligned != window:
        click.echo(f"{label} {aligned.describe()}: aligned to the campaign's time precision "
                   f"({_seconds_in_words(precision)}) from {window.describe()}", err=True)
    return aligned


def _seconds_in_words(seconds: int) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


F = TypeVar("F", bound=Callable[..., Any])


def window_options(command: F) -> F:
    """``--start``, ``--end`` and ``--last`` on a command, as ``start``, ``end`` and ``last``
    (Unix seconds, and seconds)."""
    for option in reversed((
        click.option("--start", type=INSTANT, default=None, metavar="TIME",
                     help="Window start: an ISO 8601 date or date-time (2026-11-01, "
                          "2026-11-01T12:00, 2026-11-01T12:00:00Z, 2026-11-01T12:00+02:00; a "
                          "date or a time without an offset is UTC) or Unix seconds; rounded "
                          "down to the campaign's time precision."),
        click.option("--end", type=INSTANT, default=None, metavar="TIME",
                     help="Window end, excluded; the same forms; rounded up to the campaign's "
                          "time precision."),
        click.option("--last", type=DURATION, default=None, metavar="DURATION",
                     help="The window [now - DURATION, now), aligned like --start and --end: "
                          "90m, 24h, 7d, 2w or ISO 8601 (PT12H, P7D). Not with --start/--end."),
    )):
        command = option(command)
    return command
