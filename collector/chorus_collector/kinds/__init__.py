"""Estimate kinds, one per module, registered in ``KINDS`` under the kind's name: what an
answer is (its type, the estimators' ``finalize`` returns it), which questions it takes, the
values series and comparisons follow in it, its terminal table, its OpenAPI schema and what
the dashboard draws of it. A campaign's kind is the one its mechanism names
(``Mechanism.estimate_kind``); ``docs/adding-a-campaign-kind.md`` shows how to add one.

This package sits below ``analysis``, ``http``, ``dashboard`` and ``cli``, which ask it; it
imports the answer types (``results``), the estimators' base types and ``chorus_shared``
only."""

from __future__ import annotations

from typing import Any

from chorus_collector.kinds.base import (
    MAX_CHART_BARS,
    Bar,
    Bars,
    Chart,
    EstimateKind,
    Histogram,
    HistogramBucket,
    QuantileMarker,
    ValueEstimate,
)
from chorus_collector.kinds.distribution import DistributionKind
from chorus_collector.kinds.frequency import FrequencyKind
from chorus_collector.kinds.mean import MeanKind
from chorus_collector.kinds.means import MeansKind
from chorus_collector.kinds.record import RecordKind
from chorus_shared.campaign import Campaign

__all__ = ["KINDS", "MAX_CHART_BARS", "Bar", "Bars", "Chart", "EstimateKind", "Histogram",
           "HistogramBucket", "QuantileMarker", "ValueEstimate", "kind_of", "kind_of_answer"]

KINDS: dict[str, EstimateKind] = {
    k.name: k for k in (
        FrequencyKind(), MeanKind(), MeansKind(), DistributionKind(), RecordKind(),
    )
}


def kind_of(campaign: Campaign) -> EstimateKind:
    """The kind of the campaign's answers: the one that applies to it (by default, the one
    its mechanism names)."""
    for kind in KINDS.values():
        if kind.applies_to(campaign):
            return kind
    raise LookupError(f"no estimate kind applies to mechanism {campaign.mechanism.name!r}")


def kind_of_answer(result: Any) -> EstimateKind:
    """The kind whose answer type ``result`` is (what an estimator's ``finalize`` returned)."""
    for kind in KINDS.values():
        if type(result) is kind.answer_type:
            return kind
    raise TypeError(f"no estimate kind answers with a {type(result).__name__}")
