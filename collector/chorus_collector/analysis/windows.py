"""One window's estimate, and the per-value numbers that series and comparisons read from it.

``estimate_window`` is what ``GET /v1/campaigns/<name>/estimates`` answers: the window's folded
statistics plus its unfolded tail (``jobs.tail.estimate_inputs``), finalized by the campaign's
estimator. A series point and each side of a comparison are read from the same kind of result,
so a point equals the estimates route's answer for the point's interval.

A discovery campaign (``pem``, ``treehist``) asked without candidates answers for the values
its walk finds. A series or a comparison then tracks one list of values across its windows:
:func:`discover` finds them once, over everything the query covers (the series' whole window,
or both windows of a comparison), and each point or window re-estimates that list (the
second stage). The list is chosen from the walk's groups (PEM) or prefix reports (TreeHist),
and the re-estimates read only the final table (PEM's estimation group, TreeHist's
whole-string reports, randomized independently of the prefix), so picking the values does not
bias their estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chorus_collector.estimators import Query, QueryError, estimator_for
from chorus_collector.jobs.tail import EstimateInputs, estimate_inputs
from chorus_collector.kinds import ValueEstimate, kind_of, kind_of_answer
from chorus_collector.kinds.record import record_label
from chorus_collector.problems import Problem
from chorus_collector.results.answer import Answer
from chorus_collector.results.estimates import FrequencyEstimate
from chorus_collector.storage import Storage, StoredCampaign
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import DISCOVERY_MECHANISMS, STRING_MECHANISMS

__all__ = ["Discovered", "Estimate", "ValueEstimate", "check_window", "discover", "discovers",
           "estimate_kind", "estimate_window", "finalize", "query_labels", "record_label",
           "series_labels", "value_estimates", "window_inputs"]

#: What an estimator's finalize returns (the answer type of the campaign's kind).
Estimate = Answer


def check_window(start: int | None, end: int | None, precision: int,
                 label: str = "") -> None:
    """A window's bounds fall on time buckets and end comes after start (``label`` names the
    window in the message when a query has two)."""
    for name, value in (("start", start), ("end", end)):
        if value is not None and value % precision:
            raise Problem("window-misaligned",
                          f"{label}{name} = {value} is not a multiple of the time precision "
                          f"({precision} s); use {value - value % precision} or "
                          f"{value - value % precision + precision}")
    if start is not None and end is not None and end <= start:
        raise Problem("invalid-query", f"{label}end must be after {label}start")


def estimate_window(storage: Storage, stored: StoredCampaign,
                    query: Query) -> tuple[Estimate, EstimateInputs]:
    """The estimate of one window, from the folded statistics and the unfolded tail.

    Raises :class:`Problem` (``invalid-batch-size`` when the window has fewer reports than
    the campaign's ``min_batch_size``, or the estimator's query errors)."""
    inputs = window_inputs(storage, stored, query.start, query.end)
    return finalize(stored.campaign, inputs.n, inputs.state, query), inputs


def window_inputs(storage: Storage, stored: StoredCampaign, start: int | None,
                  end: int | None) -> EstimateInputs:
    """The window's statistics, refused (``invalid-batch-size``) below ``min_batch_size``."""
    campaign = stored.campaign
    inputs = estimate_inputs(storage, stored, start, end)
    n = inputs.n
    if n < campaign.min_batch_size:
        raise Problem("invalid-batch-size",
                      f"{n} accepted reports in this window; estimates need at least "
                      f"{campaign.min_batch_size}",
                      headers={"Retry-After": str(campaign.time_precision)}, n=n,
                      min_batch_size=campaign.min_batch_size)
    return inputs


def finalize(campaign: Campaign, n: int, state: np.ndarray, query: Query) -> Estimate:
    """The estimator's finalize, its query errors as problems."""
    try:
        return estimator_for(campaign.mechanism.name).finalize(campaign, n, state, query)
    except QueryError as error:
        raise Problem(error.kind, str(error)) from None


def estimate_kind(campaign: Campaign) -> str:
    """The name of the campaign's kind (:func:`chorus_collector.kinds.kind_of`)."""
    return kind_of(campaign).name


def series_labels(campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
    """The values a campaign's estimates are given for, in the estimator's order."""
    return kind_of(campaign).labels(campaign, candidates)


def discovers(campaign: Campaign, candidates: tuple[str, ...]) -> bool:
    """Whether a query without candidates on a discovery campaign: its values are found."""
    return not candidates and campaign.mechanism.name in DISCOVERY_MECHANISMS


@dataclass(frozen=True)
class Discovered:
    """The values a series or comparison tracks, found once over all it covers."""

    values: tuple[str, ...]
    n: int
    #: The estimator's record of the walk (``extra["discovery"]``) and where it looked.
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.record, "n": self.n, "values": list(self.values)}


def discover(campaign: Campaign, n: int, state: np.ndarray,
             windows: list[dict[str, int | None]]) -> Discovered:
    """The values a discovery campaign's walk finds in ``state`` (the summed statistics of
    ``windows``), in the estimates route's order (largest estimate first), every one it lists
    whether flagged ``detected`` or not: a series or comparison then re-estimates this list in
    each of its windows. Raises ``invalid-batch-size`` below ``min_batch_size`` reports."""
    if n < campaign.min_batch_size:
        raise Problem("invalid-batch-size",
                      f"{n} accepted reports in all the query covers; discovering the values "
                      f"to track needs at least {campaign.min_batch_size}", n=n,
                      min_batch_size=campaign.min_batch_size)
    result = finalize(campaign, n, state, Query(windows[0]["start"], windows[-1]["end"]))
    assert isinstance(result, FrequencyEstimate)
    record = {**result.extra.get("discovery", {}), "windows": windows,
              "warnings": list(result.warnings)}
    return Discovered(tuple(row.value for row in result.rows), n, record)


def query_labels(campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
    """The values a query's answer is given for; candidates are required for open strings
    (except discovery campaigns, whose values :func:`discover` finds) and refused
    elsewhere."""
    kind = kind_of(campaign)
    if not candidates and kind.needs_candidates(campaign):
        raise Problem("candidates-required",
                      "estimates over open strings need a candidate list (candidate=... or "
                      "a JSON body with \"candidates\")")
    if candidates and "candidates" not in kind.query_parameters(campaign):
        raise Problem("invalid-query", "candidates apply to campaigns over open strings ("
                      f"{', '.join(STRING_MECHANISMS)}) only")
    if len(set(candidates)) != len(candidates):
        raise Problem("invalid-candidate", "a candidate is listed twice")
    return series_labels(campaign, candidates)


def value_estimates(result: Estimate) -> dict[str, ValueEstimate]:
    """Each value's unbiased estimate in ``result`` (which must not be post-processed), as
    its kind reads it (:meth:`chorus_collector.kinds.EstimateKind.value_estimates`)."""
    return kind_of_answer(result).value_estimates(result)
