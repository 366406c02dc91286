"""A scheduled campaign's periods as its estimates see them (docs/campaigns.md, "Over time").

A campaign with a schedule (:mod:`chorus_shared.schedule`) has each install report in r of
its T periods, drawn once on the device uniformly over the whole horizon; an install that
arrives late forfeits the drawn periods already past. So every install active in a period
reports in it with the same probability r/T, whatever its values, its arrival or when it
leaves, and the plain mean of one period's reports is an unbiased estimate for the installs
active in that period. This module says so beside every estimate of such a campaign, and gives
series their natural grid: one point per period, aligned to the campaign's start, over the
whole horizon up to now (empty periods included, so a silent period is seen, not dropped).

The standard errors need no change: the estimators' plug-in variance (the binomial of the
reported share, or the sample variance of the debiased reports) estimates v̄ + S² per report,
and the exact variance of a period's mean is (v̄ + S²)·E[1/m | m ≥ 1] − S²/N (``sampled_variance``
in :mod:`chorus_shared.schedule`): the sampling of installs is already in it, and the stated
error is conservative by S²/N. ``tests/collector/analysis/test_schedule_calibration.py``
checks this by simulation, with churn and late arrivals.
"""

from __future__ import annotations

from chorus_collector.analysis.steps import MAX_POINTS, Step
from chorus_collector.kinds import kind_of
from chorus_shared.campaign import Campaign
from chorus_shared.schedule import Schedule

__all__ = ["PERIOD", "SAMPLING_NOTE", "describe_series", "describe_window", "horizon_window",
           "period_step", "planned_reports"]

#: The step name of a scheduled campaign's own periods (its cadence, aligned to its start).
PERIOD = "period"

_SUBJECTS = {"frequency": "each value's share", "mean": "the mean", "means": "each mean",
             "distribution": "the distribution", "record": "each share"}


def period_step(schedule: Schedule) -> Step:
    """One point per period of the campaign: its cadence, from its start (a week of a
    campaign starting on a Thursday runs Thursday to Wednesday, not as an ISO week)."""
    return Step(schedule.seconds, PERIOD, origin=schedule.start % schedule.seconds)


def planned_reports(campaign: Campaign) -> int:
    """r: the periods one install reports in when the app gives the campaign its budget."""
    assert campaign.schedule is not None
    return min(campaign.reports_per_install, campaign.schedule.periods)


def horizon_window(schedule: Schedule, now: float) -> tuple[int, int]:
    """Every period of the horizon up to and including the one containing ``now`` (the last
    :data:`MAX_POINTS` of them, for a long horizon): an empty window before the start."""
    last = min(schedule.periods, max(0, schedule.index(now) + 1))  # one past the last shown
    first = max(0, last - MAX_POINTS)
    return schedule.period_start(first), schedule.period_start(last)


#: Why the standard errors already cover which installs report in a period.
SAMPLING_NOTE = ("The standard errors also cover which installs the schedule had report in a "
                 "period: the plug-in variance per report estimates the mechanism's noise plus "
                 "the spread of the values between installs (v̄ + S²), and the exact variance of "
                 "a period's estimate is (v̄ + S²)·E[1/m] − S²/N, so the stated error is "
                 "slightly conservative.")


def _design(campaign: Campaign, schedule: Schedule) -> str:
    return (f"each install active in a {schedule.cadence} reports in it with probability r/T = "
            f"{planned_reports(campaign)}/{schedule.periods}, r being the reports the "
            "campaign's budget pays for, drawn on the device independently of its values")


def _subject(campaign: Campaign) -> str:
    return _SUBJECTS.get(kind_of(campaign).name, "each estimate")


def describe_window(campaign: Campaign, start: int | None, end: int | None) -> str | None:
    """What an estimate of this campaign over [start, end) estimates; None without a
    schedule (then the reports are whatever the installs sent, with no design to state)."""
    schedule = campaign.schedule
    if schedule is None:
        return None
    cadence, design = schedule.cadence, _design(campaign, schedule)
    if start is not None and end is not None and end - start == schedule.seconds \
            and (start - schedule.start) % schedule.seconds == 0:
        return (f"{_subject(campaign)} among the installs active in the {cadence} from "
                f"{schedule.date(schedule.index(start))} ({design}; installs that arrived "
                "later or left earlier are not in it)")
    return (f"pooled over the reports of the window: {_subject(campaign)} among the installs "
            f"active in its {cadence}s, each {cadence} weighted by its reports ({design}; an "
            f"install reports at most once per {cadence} and may report in several of the "
            f"window's {cadence}s). Ask for one {cadence} at a time, or a series, for the "
            f"estimate per {cadence}")


def describe_series(campaign: Campaign, grid: Step) -> str | None:
    """What each point of a series on ``grid`` estimates; None without a schedule."""
    schedule = campaign.schedule
    if schedule is None:
        return None
    cadence, design = schedule.cadence, _design(campaign, schedule)
    if grid.name == PERIOD:
        return (f"each point: {_subject(campaign)} among the installs active in that "
                f"{cadence} ({design}). A {cadence} without reports, or with fewer than "
                "min_batch_size, has no estimate and says so")
    return (f"the points are not the campaign's {cadence}s (from {schedule.date(0)}): each "
            f"pools the reports of the installs drawn for the {cadence}s it overlaps, as the "
            f"app happened to send them ({design}). step={PERIOD}, the default, gives one "
            f"point per {cadence}")
