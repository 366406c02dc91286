"""Time series: a campaign's estimates per point of a time grid, from the per-bucket statistics.

A point's estimate is the estimator's ``finalize`` of the point's summed statistics: the
folded (n, state) of its buckets (the ``aggregates`` table) plus its unfolded reports mapped
now, read in one snapshot (``Storage.bucket_snapshot``). So a series costs O(points × state
size) whatever the number of reports, and every point equals the estimates route's answer
for the point's interval. Raw reports are read only for the unfolded tail, as every estimate
does.

A discovery campaign (``pem``, ``treehist``) asked without candidates tracks the values its
walk finds over the series' whole window (the summed statistics of every point): the same
values the estimates route lists for that window, flagged detected or not, in its order. Each
point then re-estimates that list (the second stage), so every series covers the whole window
and its points can be compared; the answer's ``discovery`` says what the walk did. A value
that becomes frequent only late in a long window may fall short of the whole window's top:
ask for a shorter window, or list it as a candidate.

A campaign with a schedule (docs/campaigns.md, "Over time") is asked per period by default:
one point per period of its cadence, aligned to its start, over every period of its horizon up
to now, so a period without reports is a point that says so rather than a gap in the axis;
the answer says what each point estimates (``analysis/periods.py``).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import time as wall_clock
from typing import Any

import numpy as np

from chorus_collector.analysis.periods import (
    PERIOD,
    SAMPLING_NOTE,
    describe_series,
    horizon_window,
    period_step,
)
from chorus_collector.analysis.steps import MAX_POINTS, Step, parse_step, points
from chorus_collector.analysis.windows import (
    Estimate,
    ValueEstimate,
    check_window,
    discover,
    discovers,
    finalize,
    query_labels,
    value_estimates,
)
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.jobs.tail import read_tail
from chorus_collector.kinds import kind_of
from chorus_collector.problems import Problem
from chorus_collector.results.encoding import CsvWriter
from chorus_collector.results.estimates import CONFIDENCE
from chorus_collector.storage import Storage, StoredCampaign, state_array
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import PrefixDiscovery

__all__ = ["MAX_POINTS", "MAX_SERIES_CELLS", "Series", "SeriesPoint", "SeriesResult",
           "estimate_series"]

#: Points × values finalized: bounds a query's time and its answer's size (a 1,024-category
#: campaign gets 244 points, a 16-category one the full 1,000).
MAX_SERIES_CELLS = 250_000
#: The most a series may spend on fits, in ``Estimator.fit_cost`` units (about 1 s of CPU):
#: 320 Square Wave points at 256 × 256 buckets (a tenth of a unit each), 80 at 512 × 512,
#: so that a series answers well within the server's 60 s worker timeout.
MAX_FIT_COST = 32.0

INDEPENDENCE = ("Each point's standard error is its own window's: two points are independent "
                "only when every user reports at most once per point (a user who reports in "
                "several points, e.g. a memoized report, correlates them).")
SUPPRESSION = ("A point with fewer reports than the campaign's min_batch_size (an empty one "
               "too) keeps its start, end and n but has null estimates and suppressed: true.")


@dataclass(slots=True)
class SeriesPoint:
    start: int
    end: int
    n: int
    estimate: float | None = None
    std_error: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    suppressed: bool = False
    reason: str | None = None  # why a point is suppressed
    detected: bool | None = None  # open-string candidates only

    def to_json(self, with_detected: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "start": self.start, "end": self.end, "n": self.n,
            "estimate": _finite(self.estimate), "std_error": _finite(self.std_error),
            "ci_low": _finite(self.ci_low), "ci_high": _finite(self.ci_high),
            "suppressed": self.suppressed, "reason": self.reason}
        if with_detected:
            body["detected"] = self.detected
        return body


@dataclass(frozen=True)
class Series:
    value: str
    points: list[SeriesPoint]


@dataclass(frozen=True)
class SeriesResult:
    campaign: str
    mechanism: str
    epsilon: float
    estimate_kind: str  # "frequency", "mean" or "means"
    step: int  # seconds
    step_name: str  # "bucket", "day", "week" or "<n>s"
    window: dict[str, int | None]
    variance_model: str
    min_batch_size: int
    series: list[Series]
    confidence: float = CONFIDENCE
    freshness: dict[str, Any] = field(default_factory=dict)
    #: Whether points carry the estimator's ``detected`` flag (open-string candidates).
    detects: bool = False
    #: A discovery campaign asked without candidates: how its values were found.
    discovery: dict[str, Any] | None = None
    #: A campaign with a schedule: what each point estimates, and the calendar.
    estimand: str | None = None
    schedule: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "series", "campaign": self.campaign, "mechanism": self.mechanism,
            "epsilon": self.epsilon, "estimate_kind": self.estimate_kind, "step": self.step,
            "step_name": self.step_name, "window": dict(self.window),
            "confidence": self.confidence, "variance_model": self.variance_model,
            "suppression": SUPPRESSION, "min_batch_size": self.min_batch_size,
            "freshness": dict(self.freshness),
            "series": [{"value": s.value,
                        "points": [p.to_json(self.detects) for p in s.points]}
                       for s in self.series]}
        if self.discovery is not None:
            body["discovery"] = self.discovery
        if self.schedule is not None:
            body["schedule"] = self.schedule
            body["estimand"] = self.estimand
        return body

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        header = ["value", "start", "end", "start_iso", "n", "estimate", "std_error", "ci_low",
                  "ci_high", "suppressed", "epsilon"]
        writer.writerow([*header, "detected"] if self.detects else header)
        for series in self.series:
            for p in series.points:
                row = [series.value, p.start, p.end, iso(p.start), p.n, _finite(p.estimate),
                       _finite(p.std_error), _finite(p.ci_low), _finite(p.ci_high),
                       p.suppressed, self.epsilon]
                writer.writerow([*row, p.detected] if self.detects else row)
        return buffer.getvalue()


def iso(seconds: int) -> str:
    """Unix seconds as ISO 8601 UTC: 2026-01-01T00:00:00Z (empty past the year 9999, which
    ISO 8601's four-digit years cannot write; report times go to 2**40 s)."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return ""


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def estimate_series(storage: Storage, stored: StoredCampaign, *, start: int | None = None,
                    end: int | None = None, step: int | str | None = None,
                    values: Sequence[str] = (), top: int | None = None,
                    candidates: Sequence[str] = (), now: float | None = None,
                    align: str = "exact") -> SeriesResult:
    """The campaign's unbiased estimates per point of ``step`` over [start, end).

    ``step``: "bucket" (the time precision), "day", "week", seconds (a multiple of the
    time precision) or "period" (a scheduled campaign's own periods). By default a campaign
    with a schedule is asked per period, over every period of its horizon up to ``now``
    (the wall clock if None), and any other per bucket, over all stored data widened to whole
    points.
    Frequencies give one series per category (``values`` names some, ``top`` keeps the k
    largest over the whole window), open-string campaigns one per candidate (required, except
    for a discovery campaign: one per value its walk finds over the whole window), means one
    ("mean"), vector means one per attribute. ``align``: "exact" refuses bounds off the time
    precision; "outer" widens them to whole points of the grid (start rounded down, end up),
    for a caller whose window is a dashboard's time picker (docs/grafana.md). Raises
    :class:`Problem`.
    """
    campaign = stored.campaign
    precision = campaign.time_precision
    grid = _grid(campaign, step)
    if align == "outer":
        start, end = widened(grid, start, end)
    elif align != "exact":
        raise Problem("invalid-query", "align must be exact or outer")
    check_window(start, end, precision)
    wanted = tuple(candidates)
    labels = query_labels(campaign, wanted)
    finding = discovers(campaign, wanted)
    # The values a discovery will track are known only once it has run (below).
    _check_selection(campaign, labels, () if finding else values, top)
    if grid.name == PERIOD and (start is None or end is None):
        assert campaign.schedule is not None
        first, last = horizon_window(campaign.schedule,
                                     wall_clock() if now is None else now)
        start, end = (first if start is None else start), (last if end is None else end)
    else:
        start, end = _default_window(storage, stored, grid, start, end)
    intervals = points(grid, start, end) if start is not None and end is not None \
        and end > start else []
    mechanism = campaign.mechanism
    # A walk lists at most ``top`` values.
    most = mechanism.top if finding and isinstance(mechanism, PrefixDiscovery) else len(labels)
    if len(intervals) * most > MAX_SERIES_CELLS:
        raise Problem("query-too-large",
                      f"{len(intervals)} points × {len(labels)} values is more than "
                      f"{MAX_SERIES_CELLS:,} estimates in one series: use a longer step, a "
                      "shorter window or fewer candidates")
    cost = len(intervals) * estimator_for(campaign.mechanism.name).fit_cost(campaign.mechanism)
    if cost > MAX_FIT_COST:
        most = int(len(intervals) * MAX_FIT_COST / cost)
        raise Problem("query-too-large",
                      f"each of the {len(intervals)} points refits {campaign.mechanism.name}'s "
                      f"distribution and its bootstrap; at this grid a series has at most "
                      f"{most} points: use a longer step or a shorter window")
    counts, states, unfolded, folded_at = _point_statistics(storage, stored, intervals,
                                                            start, end)
    discovery = None
    if finding:
        found = discover(campaign, int(counts.sum()), states.sum(axis=0),
                         [{"start": start, "end": end}])
        wanted, labels, discovery = found.values, list(found.values), found.to_json()
        _check_selection(campaign, labels, values, top)
    chosen = _chosen(campaign, labels, values, top, counts, states, start, end, wanted)
    results: list[Estimate | str] = [
        _point_result(campaign, int(n), state, Query(a, b, wanted))
        for (a, b), n, state in zip(intervals, counts, states, strict=True)]
    model = next((r.variance_model for r in results if not isinstance(r, str)), None)
    if campaign.schedule is not None:
        model = f"{model}. {SAMPLING_NOTE}" if model else SAMPLING_NOTE
    series = [Series(value, []) for value in chosen]
    for (a, b), n, result in zip(intervals, counts.tolist(), results, strict=True):
        estimates = None if isinstance(result, str) else value_estimates(result)
        for one in series:
            one.points.append(_point(a, b, n, estimates, result, one.value))
    return SeriesResult(
        campaign=campaign.name, mechanism=campaign.mechanism.name,
        epsilon=campaign.mechanism.epsilon, estimate_kind=kind_of(campaign).name,
        step=grid.seconds, step_name=grid.name, window={"start": start, "end": end},
        variance_model=f"{model}. {INDEPENDENCE}" if model else INDEPENDENCE,
        min_batch_size=campaign.min_batch_size, series=series,
        freshness={"folded_at": folded_at, "unfolded_reports": unfolded},
        detects=campaign.domain.kind == "strings", discovery=discovery,
        estimand=describe_series(campaign, grid),
        schedule=None if campaign.schedule is None else {
            **campaign.schedule.to_json(), "reporting": campaign.reporting})


def widened(grid: Step, start: int | None, end: int | None) -> tuple[int | None, int | None]:
    """[start, end) widened to whole points of ``grid``: every point is then a whole window
    (a partial edge point would hold fewer reports and say less). Points are whole time
    buckets, so the widened bounds fall on the time precision."""
    return (None if start is None else grid.floor(start),
            None if end is None else grid.ceil(end))


def _grid(campaign: Campaign, step: int | str | None) -> Step:
    """The series' grid: ``step`` read against the campaign (see :func:`estimate_series`)."""
    if step is None:
        step = PERIOD if campaign.schedule is not None else "bucket"
    if step == PERIOD:
        if campaign.schedule is None:
            raise Problem("invalid-query", f"step={PERIOD} is the periods of a campaign's "
                          "schedule, and this campaign has none: use bucket, day, week or "
                          "seconds")
        return period_step(campaign.schedule)
    return parse_step(step, campaign.time_precision)


def _check_selection(campaign: Campaign, labels: list[str], values: Sequence[str],
                     top: int | None) -> None:
    if values and top is not None:
        raise Problem("invalid-query", "ask for named values or the top k, not both")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise Problem("invalid-query", "top must be a whole number of at least 1")
    if top is not None and not kind_of(campaign).ranked:
        raise Problem("invalid-query", "top applies to frequencies; this campaign estimates "
                                       "means")
    known = set(labels)
    unknown = [v for v in values if v not in known]
    if unknown:
        shown = ", ".join(repr(v) for v in labels[:5]) + (", …" if len(labels) > 5 else "")
        raise Problem("invalid-query", f"unknown values {unknown[:5]!r}: this campaign's "
                      f"values are {shown}")
    if len(set(values)) != len(values):
        raise Problem("invalid-query", "a value is listed twice")


def _default_window(storage: Storage, stored: StoredCampaign, grid: Step, start: int | None,
                    end: int | None) -> tuple[int | None, int | None]:
    """Open bounds become the first and last bucket with data, widened to whole points."""
    if start is not None and end is not None:
        return start, end
    span = storage.time_span(stored.id)
    if span is None:
        return start, end
    first, last = span
    return (grid.floor(first) if start is None else start,
            grid.ceil(last + stored.campaign.time_precision) if end is None else end)


def _point_statistics(storage: Storage, stored: StoredCampaign,
                      intervals: list[tuple[int, int]], start: int | None,
                      end: int | None) -> tuple[np.ndarray, np.ndarray, int, float | None]:
    """(n per point, summed state per point, unfolded reports, folded_at)."""
    mechanism = stored.campaign.mechanism
    size = estimator_for(mechanism.name).state_size(mechanism)
    counts = np.zeros(len(intervals), dtype=np.int64)
    states = np.zeros((len(intervals), size), dtype=np.int64)
    if not intervals:
        return counts, states, 0, None
    with read_tail(storage, stored) as tail:  # mapped page by page, kept for the next query
        snapshot = storage.bucket_snapshot(stored.id, start, end, tail)
    starts = np.array([a for a, _ in intervals], dtype=np.int64)
    for time, n, blob in snapshot.buckets:
        at = int(np.searchsorted(starts, time, side="right")) - 1
        counts[at] += n
        states[at] += state_array(blob)
    unfolded = 0
    for time, n, state in tail.window(start, end):
        at = int(np.searchsorted(starts, time, side="right")) - 1
        counts[at] += n
        states[at] += state
        unfolded += n
    return counts, states, unfolded, snapshot.folded_at


def _chosen(campaign: Campaign, labels: list[str], values: Sequence[str], top: int | None,
            counts: np.ndarray, states: np.ndarray, start: int | None, end: int | None,
            candidates: tuple[str, ...]) -> list[str]:
    """The values to give a series for: named ones, the top k over the window, or all."""
    if values:
        return list(values)
    if top is None:
        return labels
    n = int(counts.sum())
    if n < campaign.min_batch_size:
        raise Problem("invalid-batch-size",
                      f"{n} accepted reports in the window; ranking the top {top} needs at "
                      f"least {campaign.min_batch_size}", n=n,
                      min_batch_size=campaign.min_batch_size)
    whole = value_estimates(finalize(campaign, n, states.sum(axis=0),
                                     Query(start, end, candidates)))

    def rank(value: str) -> float:
        estimate = whole[value].estimate
        return -estimate if math.isfinite(estimate) else math.inf

    return sorted(labels, key=rank)[:top]


def _point_result(campaign: Campaign, n: int, state: np.ndarray,
                  query: Query) -> Estimate | str:
    """The point's estimate, or why it is suppressed."""
    if n == 0:
        return "no reports in this interval"
    if n < campaign.min_batch_size:
        return (f"{n} reports, fewer than the campaign's min_batch_size "
                f"({campaign.min_batch_size})")
    try:
        return finalize(campaign, n, state, query)
    except Problem as problem:
        if problem.kind != "candidates-not-identifiable":  # the query's fault, not the data's
            raise
        return problem.detail


def _point(start: int, end: int, n: int, estimates: dict[str, ValueEstimate] | None,
           result: Estimate | str, value: str) -> SeriesPoint:
    if estimates is None:
        assert isinstance(result, str)
        return SeriesPoint(start, end, n, suppressed=True, reason=result)
    one = estimates[value]
    return SeriesPoint(start, end, n, one.estimate, one.std_error, one.ci_low, one.ci_high,
                       detected=one.detected)
