"""Means of several attributes from one report per user (MECHANISMS.md §9.3, §9.6, §9.7).

Every report stands for a vector t* with E[t* | t] = t; the mean of the reports is unbiased
per attribute, and its standard error is the sample variance of that attribute's t* over all n
reports (i.i.d.-sampling model; attributes a report did not sample count as t*_j = 0).

* ``duchi_md``: statistic [number of reports with s_j = +1, per attribute]; t*_j = ±B, so
  Σ t*_j = B·(2·ones_j − n) and Σ t*_j² = n·B².
* attribute sampling (``harmony``, ``pm_md``, ``hm_md``): the one-dimensional estimator's
  statistic per attribute, concatenated, over the reports that sampled it; its (Σ t*, Σ t*²),
  scaled by D/k, are the moments of t*_j over all n reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import MEAN_VARIANCE_MODEL, sample_std_error
from chorus_collector.estimators.duchi import DuchiEstimator
from chorus_collector.estimators.piecewise import HybridEstimator, PiecewiseEstimator
from chorus_collector.results.estimates import MeanRow, VectorMeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import DuchiMultidim, SampledAttributes

__all__ = ["DuchiMultidimEstimator", "HarmonyEstimator", "HybridMultidimEstimator",
           "PiecewiseMultidimEstimator", "vector_estimate"]


def vector_estimate(campaign: Campaign, n: int, totals: Sequence[float],
                    squares: Sequence[float], query: Query) -> VectorMeanEstimate:
    """Per-attribute means of t* ∈ [−1, 1] scale, mapped back to each attribute's range."""
    mechanism = campaign.mechanism
    domain = mechanism.domain
    rows = []
    for name, span, total, square in zip(domain.names, domain.ranges,  # type: ignore[union-attr]
                                         totals, squares, strict=True):
        scale = (span.hi - span.lo) / 2
        mean_t = total / n if n else 0.0
        rows.append(MeanRow.from_mean(name, span.lo + scale * (mean_t + 1),
                                      scale * sample_std_error(total, square, n)))
    return VectorMeanEstimate(
        campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
        rows=rows, variance_model=MEAN_VARIANCE_MODEL, window=query.window,
        extra={"clipping": "each attribute was clipped to its [lo, hi] on the device"})


class DuchiMultidimEstimator(Estimator[DuchiMultidim]):
    name: ClassVar[str] = "duchi_md"
    mechanism_type: ClassVar[MechanismTypes] = DuchiMultidim

    def state_size(self, mechanism: DuchiMultidim) -> int:
        return mechanism.d

    def map(self, mechanism: DuchiMultidim, payloads: Sequence[Any]) -> np.ndarray:
        masks = np.fromiter(payloads, dtype=np.uint64, count=len(payloads))
        bits = (masks[:, None] >> np.arange(mechanism.d, dtype=np.uint64)) & np.uint64(1)
        ones: np.ndarray = bits.sum(axis=0, dtype=np.int64)
        return ones

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> VectorMeanEstimate:
        mechanism = self.mechanism_of(campaign)
        b = mechanism.b
        totals = [b * (2 * int(ones) - n) for ones in state]
        return vector_estimate(campaign, n, totals, [b * b * n] * mechanism.d, query)


class _Moments(Protocol):
    """What an attribute-sampling estimator needs of its one-number estimator."""

    def state_size(self, mechanism: Any) -> int: ...

    def map(self, mechanism: Any, payloads: Sequence[Any]) -> np.ndarray: ...

    def moments(self, mechanism: Any, state: np.ndarray) -> tuple[float, float]: ...


class SampledEstimator(Estimator[SampledAttributes]):
    """One attribute per report (Harmony, PM/HM with sampling): the one-number estimator's
    statistic per attribute, scaled by D/k."""

    mechanism_type: ClassVar[MechanismTypes] = SampledAttributes
    inner: ClassVar[_Moments]

    def state_size(self, mechanism: SampledAttributes) -> int:
        return mechanism.d * self.inner.state_size(mechanism.inner)

    def map(self, mechanism: SampledAttributes, payloads: Sequence[Any]) -> np.ndarray:
        per_attribute: list[list[Any]] = [[] for _ in range(mechanism.d)]
        for payload in payloads:
            for j, y in zip(payload["j"], payload["y"], strict=True):
                per_attribute[j].append(y)
        return np.concatenate([self.inner.map(mechanism.inner, ys)
                               for ys in per_attribute]).astype(np.int64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> VectorMeanEstimate:
        mechanism = self.mechanism_of(campaign)
        scale = mechanism.scale
        totals, squares = [], []
        for part in state.reshape(mechanism.d, -1):
            total, square = self.inner.moments(mechanism.inner, part)
            totals.append(scale * total)
            squares.append(scale * scale * square)
        return vector_estimate(campaign, n, totals, squares, query)


class HarmonyEstimator(SampledEstimator):
    name: ClassVar[str] = "harmony"
    inner = DuchiEstimator()


class PiecewiseMultidimEstimator(SampledEstimator):
    name: ClassVar[str] = "pm_md"
    inner = PiecewiseEstimator()


class HybridMultidimEstimator(SampledEstimator):
    name: ClassVar[str] = "hm_md"
    inner = HybridEstimator()
