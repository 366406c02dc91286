"""A campaign's calendar, and the periods one install reports in (docs/campaigns.md, "Over time").

A lifetime budget pays for a few reports per install. Spent as they come, a daily campaign goes
silent after a week; split thin over every day, each report is almost pure noise. The variance-
optimal use (``../shared/docs/LONGITUDINAL.md`` §1, Chorus's docs/designing.md) is to *sample*:
each install reports in ``r`` periods of the campaign's horizon, drawn uniformly without
replacement, at the full per-report ε. Every period then gets a random sample of the installs
active in it, and the sample mean is an unbiased estimate of that period's share.

How the draw is made, and why:

* **Over the whole horizon, whenever the install first sees the campaign** (a *virtual*
  schedule). An install that arrives late keeps the slots its draw put after its arrival and
  forfeits the earlier ones, which it never charges: the ε stays in its ledger. Every install
  active in period t then reports in t with the same probability r/T, so the plain mean of a
  period's reports is unbiased for the installs active then, with churn or late arrivals, and no
  report needs to say when its install arrived (such a cohort label would make reports linkable
  and undo a shuffler's anonymity). Spreading a late install's reports over what remains would
  give late installs more weight, which only a per-report label could correct.
* **From the OS CSPRNG, once, stored**: never from a value, an install id or anything the
  collector knows, and never drawn again on restart (``LONGITUDINAL.md`` §2.3).
* **Indexed by the campaign's calendar**, not by the device's clock alone: the period of a
  report is the campaign's period containing the time, and a period once passed (charged or
  forfeited) never opens again, whichever way the clock later moves.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from chorus_shared.errors import CampaignError
from chorus_shared.rng import RandomSource

__all__ = ["CADENCES", "DEFAULT_PERIODS", "MAX_PERIODS", "Schedule", "draw_periods",
           "expected_inverse_count", "sampled_variance", "schedule_from_json"]

Cadence = Literal["day", "week"]
#: Seconds in one period of each cadence (UTC days; weeks of 7 UTC days from the start).
CADENCES: dict[str, int] = {"day": 86400, "week": 7 * 86400}
#: A campaign without an end plans over its first year: a lifetime budget cannot fund a
#: campaign that never ends, so its horizon is stated rather than open.
DEFAULT_PERIODS: dict[str, int] = {"day": 365, "week": 52}
#: Ten years of days: far beyond any plan, small enough that a slot list stays small.
MAX_PERIODS = 3660


@dataclass(frozen=True)
class Schedule:
    """A campaign's cadence and horizon: ``periods`` periods of one ``cadence`` from ``start``
    (seconds since the epoch, a UTC midnight)."""

    cadence: Cadence
    start: int
    periods: int

    @property
    def seconds(self) -> int:
        return CADENCES[self.cadence]

    @property
    def end(self) -> int:
        """The first second after the horizon."""
        return self.start + self.periods * self.seconds

    def index(self, unix_seconds: float) -> int:
        """The period containing this time: negative before the start, ``periods`` or more
        after the end."""
        return math.floor((unix_seconds - self.start) / self.seconds)

    def period_start(self, index: int) -> int:
        return self.start + index * self.seconds

    def date(self, index: int) -> str:
        """The UTC date on which a period begins, e.g. ``2026-01-05``."""
        return _iso_date(self.period_start(index))

    def to_json(self) -> dict[str, Any]:
        return {"cadence": self.cadence, "start": _iso_date(self.start),
                "periods": self.periods}

    def describe(self, reports: int) -> str:
        """How many reports one install makes, and when, in words."""
        last = _iso_date(self.end - 86400)
        span = f"{self.periods} {self.cadence}s from {self.date(0)} to {last}"
        if reports >= self.periods:
            return f"one report every {self.cadence} for {span}"
        noun = "report" if reports == 1 else "reports"
        return (f"{reports} {noun} per install over {span}, in {self.cadence}s drawn at "
                "random on the device when it first sees the campaign (an install that "
                "arrives later keeps only the draws still ahead of it)")


def schedule_from_json(obj: object, time_precision: int) -> Schedule | None:
    """A campaign's ``schedule`` (absent: a campaign without a calendar).

    A definition gives ``cadence`` (``day`` or ``week``), ``start`` (a UTC date) and either
    ``periods`` or ``end`` (the UTC date of the last day of the horizon, included); with
    neither, the horizon is one year (:data:`DEFAULT_PERIODS`). The config always holds
    ``periods``.
    """
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise CampaignError("schedule must be an object")
    unknown = set(obj) - {"cadence", "start", "periods", "end"}
    if unknown:
        raise CampaignError(f"unknown schedule fields: {sorted(unknown)}")
    cadence = obj.get("cadence", "day")
    if cadence not in CADENCES:
        raise CampaignError(f"schedule.cadence must be one of {sorted(CADENCES)}, got "
                            f"{cadence!r}")
    seconds = CADENCES[cadence]
    if seconds % time_precision:
        raise CampaignError(f"time_precision ({time_precision} s) must divide one {cadence} "
                            f"({seconds} s), so that every report falls in one period")
    start = _parse_date(obj.get("start"), "schedule.start")
    if start % time_precision:
        raise CampaignError(f"schedule.start must be a multiple of time_precision "
                            f"({time_precision} s) since 1970-01-01, so that a report's "
                            "time bucket falls in the period it was made in")
    if "periods" in obj and obj.get("end") is not None:
        raise CampaignError("give schedule.periods or schedule.end, not both")
    if obj.get("end") is not None:
        last = _parse_date(obj["end"], "schedule.end")
        if last < start:
            raise CampaignError("schedule.end is before schedule.start")
        periods = (last - start) // seconds + 1
    else:
        periods = obj.get("periods", DEFAULT_PERIODS[cadence])
    if isinstance(periods, bool) or not isinstance(periods, int) \
            or not 1 <= periods <= MAX_PERIODS:
        raise CampaignError(f"schedule.periods must be an integer in [1, {MAX_PERIODS}], got "
                            f"{periods!r}")
    return Schedule(cadence=cadence, start=start, periods=periods)


def draw_periods(rng: RandomSource, reports: int, periods: int) -> tuple[int, ...]:
    """``reports`` distinct period indexes out of ``periods``, uniformly (every subset of that
    size equally likely), sorted. ``random.Random.sample`` draws by rejection sampling from
    random bits, so with the OS CSPRNG the draw is exactly uniform."""
    if not 0 <= reports <= periods:
        raise ValueError(f"cannot draw {reports} of {periods} periods")
    return tuple(sorted(rng.sample(range(periods), reports)))


def expected_inverse_count(n: int, probability: float) -> float:
    """E[1/m | m ≥ 1] for m ~ Binomial(n, p), summed exactly where it matters.

    The terms are summed in log space from the mode outwards until they are negligible, so a
    population of 10⁷ costs a few thousand terms, not 10⁷.
    """
    if n < 1 or not 0 < probability <= 1:
        raise ValueError("need n >= 1 and 0 < probability <= 1")
    if probability == 1:
        return 1 / n
    mean = n * probability
    if mean > 1e7:
        # Far in the tail of the expansion: the first three terms are exact to ~(np)⁻³.
        q = 1 - probability
        return 1 / mean + q / mean**2 + q * (2 * q + probability) / mean**3
    log_p, log_q = math.log(probability), math.log1p(-probability)

    def log_pmf(m: int) -> float:
        return (math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
                + m * log_p + (n - m) * log_q)

    mode = max(1, min(n, math.floor((n + 1) * probability)))
    total = 0.0
    for direction in (range(mode, n + 1), range(mode - 1, 0, -1)):
        for m in direction:
            term = math.exp(log_pmf(m)) / m
            total += term
            if term < 1e-17 * total and abs(m - mode) > 10:
                break
    return total / -math.expm1(n * log_q)  # / P(m >= 1)


def sampled_variance(per_report: float, spread: float, n: int, probability: float) -> float:
    """Var of one period's mean when each of ``n`` active installs reports with
    ``probability`` (``LONGITUDINAL.md`` §1.3): (v̄ + S²)·E[1/m | m ≥ 1] − S²/n, where
    ``per_report`` is v̄ (the mechanism's variance of one debiased report) and ``spread`` is
    S² (the variance of the true values across the installs)."""
    return (per_report + spread) * expected_inverse_count(n, probability) - spread / n


def _parse_date(value: object, field: str) -> int:
    if not isinstance(value, str):
        raise CampaignError(f"{field} must be a UTC date such as \"2026-01-01\", got {value!r}")
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise CampaignError(f"{field} must be a UTC date such as \"2026-01-01\", got "
                            f"{value!r}") from None
    if len(value) != 10:
        raise CampaignError(f"{field} must be written YYYY-MM-DD, got {value!r}")
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def _iso_date(unix_seconds: int) -> str:
    return dt.datetime.fromtimestamp(unix_seconds, dt.UTC).date().isoformat()
