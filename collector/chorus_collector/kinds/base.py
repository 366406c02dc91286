"""What every estimate kind declares: :class:`EstimateKind`, and the chart specs it returns.

A kind is the shape of an answer, whatever the mechanism behind it: its answer type (what the
estimators' ``finalize`` returns for it), the questions a query may add, the values a series
or a comparison follows in it, its terminal table, its OpenAPI schema and what the dashboard
draws of it. The estimators compute; the kind says what the result is and how it is shown.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.campaign import Campaign

__all__ = ["MAX_CHART_BARS", "Bar", "Bars", "Chart", "EstimateKind", "Histogram", "HistogramBucket",
           "QuantileMarker", "ValueEstimate", "schema_ref"]


@dataclass(frozen=True, slots=True)
class ValueEstimate:
    """One value's unbiased estimate in one window (a frequency is a fraction of n). The
    standard error and interval are None where the answer states none (a Square Wave
    distribution): a comparison then cannot test the value and says so."""

    estimate: float
    std_error: float | None
    ci_low: float | None
    ci_high: float | None
    detected: bool | None = None


def schema_ref(name: str) -> dict[str, str]:
    """A reference to one of the OpenAPI document's component schemas."""
    return {"$ref": f"#/components/schemas/{name}"}


# -- what the dashboard draws: plain data, which dashboard/charts.py turns into SVG ------------

@dataclass(frozen=True)
class Bar:
    """One estimate and its 95% interval, as a bar with whiskers (None: not estimated, e.g.
    suppressed)."""

    label: str
    estimate: float | None
    low: float | None
    high: float | None
    flagged: bool = False  # drawn in the accent colour (a detected value, a significant change)


@dataclass(frozen=True)
class Bars:
    """A bar chart of estimates with their intervals."""

    bars: list[Bar]
    title: str
    description: str


@dataclass(frozen=True)
class HistogramBucket:
    """One histogram bucket [lo, hi) of a distribution: its share with a 95% interval (None:
    the answer states none)."""

    lo: float
    hi: float
    share: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class QuantileMarker:
    """A quantile over a histogram; the positions are in bucket units (bucket j spans
    [j, j + 1)). The interval and its positions are None where the answer states none."""

    label: str
    value: float
    low: float | None
    high: float | None
    position: float
    low_position: float | None
    high_position: float | None


@dataclass(frozen=True)
class Histogram:
    """Buckets with their interval band, and quantile markers over them."""

    buckets: list[HistogramBucket]
    markers: list[QuantileMarker]
    title: str
    description: str


Chart = Bars | Histogram
#: More bars than this: a bar chart shows the largest, the table all of them.
MAX_CHART_BARS = 40


class EstimateKind(ABC):
    """One kind of answer, registered in ``KINDS`` under :attr:`name`.

    A campaign's kind is the one its mechanism names (``Mechanism.estimate_kind``); the
    answer's JSON carries it as ``kind``.
    """

    #: The kind's name: the answer's ``kind``, a series' or comparison's ``estimate_kind``.
    name: ClassVar[str]
    #: What the estimators' ``finalize`` returns for a campaign of this kind.
    answer_type: ClassVar[type]
    #: The first column's title in the series and comparison tables.
    value_title: ClassVar[str] = "attribute"
    #: How the series and comparison tables print an estimate.
    number_format: ClassVar[str] = ".4g"
    #: Whether a series may keep only the ``top`` largest values.
    ranked: ClassVar[bool] = False
    #: The OpenAPI component schema its answers validate against.
    answer_schema: ClassVar[str] = "Estimate"
    #: The OpenAPI component schemas this kind brings (rows, statistics, …), by name.
    schemas: ClassVar[Mapping[str, Any]] = {}
    #: The dashboard template that shows the answer (its chart and tables).
    template: ClassVar[str]

    def applies_to(self, campaign: Campaign) -> bool:
        """Whether the campaign's answers are of this kind."""
        return campaign.mechanism.estimate_kind == self.name

    def query_parameters(self, campaign: Campaign) -> frozenset[str]:
        """The questions an estimates query of this campaign may add to a window and a
        post-processing: ``candidates``, ``quantiles``, ``ranges``, ``joints``."""
        return frozenset()

    def needs_candidates(self, campaign: Campaign) -> bool:
        """Whether its estimates exist only for a candidate list the analyst gives."""
        return False

    @abstractmethod
    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        """The values its estimates are given for, in the estimator's order: the series a
        series query draws, the rows a comparison compares."""

    @abstractmethod
    def value_estimates(self, result: Any) -> dict[str, ValueEstimate]:
        """Each value's unbiased estimate in ``result`` (an :attr:`answer_type`, not
        post-processed), keyed by :meth:`labels`."""

    @abstractmethod
    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        """The terminal table of a JSON answer, after its header line; ``truth`` (the true
        values, keyed like :meth:`labels`) is printed beside the estimates."""

    @abstractmethod
    def chart(self, answer: Mapping[str, Any]) -> Chart:
        """What the dashboard draws of a JSON answer."""

