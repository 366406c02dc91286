"""What every distribution estimator shares: from fitted bucket shares to the answers.

A distribution estimator (Square Wave, hierarchical histograms) fits the share θ_j of each of
the campaign's D buckets, with its uncertainty in one of two forms:

* ``covariance``: the exact covariance of θ̂ for an estimator that is *linear* in the report
  counts (hierarchical histograms after constrained least squares). Every answer below that
  is linear in θ (a bucket, a range, the CDF at an edge, the mean) then has an analytic
  standard error r^T Σ r. A quantile is read by walking down the fit's tree
  (:func:`tree_quantile`), and its interval by the same walk on the CDF's pointwise band
  F̂ ± z·σ (MECHANISMS-2.md §1.2);
* none (``no_intervals``, its reason): every standard error and interval of the answer is
  then None. Square Wave's fit is of this form (issue 34 item 3): EM/EMS have no closed form,
  the parametric bootstrap it had did not cover, and no calibration tried did
  (square_wave.py, docs/mechanisms/distributions.md).

The CDF reads a monotone F̂ (the isotonic regression of the cumulative shares, clipped to
[0, 1]), and so do the quantiles of a fit without a tree (Square Wave's θ̂ is on the simplex,
so its F̂ is monotone already); inside a bucket, values are taken as uniform on the campaign's
scale (linear or log), which is also how a range that does not fall on bucket edges is split.

**Why a tree walk for hierarchical histograms** (issue 34). Where the CDF is flat next to the
quantile (the upper tail), the unbiased F̂ wanders by ±σ around a curve that rises by less
than σ over many buckets, and any read that looks at every edge is pulled by the extremes of
that noise. The isotonic fit pools a dip far out in the tail with everything before it and
moves the crossing there: p99 of LogNormal(ln 200 ms, 0.5) on a log grid [1, 10⁴] ms
(D = 256, ε = 1) averaged 3,200 ms against a true 640 at n = 10⁴, RMSE 1,680 at n = 10⁵. A
running maximum stops at the first spike: biased low by up to 2.2 of its own standard
deviations (p99 on a linear grid). The walk looks at B edges per level, the tree's own node
boundaries, so it meets far fewer extremes, and its error stayed within 0.53 standard
deviations of unbiased for p50–p99 over six shapes, both scales and n = 10⁴–10⁶
(tests/mechanisms/test_hh_quantiles.py holds it on other populations). Its interval walks
the band F̂ ± 1.96σ the same way; the envelopes of the band (the first t whose upper band
reaches q, the last whose lower band is below it) covered 99–100% at p90–p99 with intervals
up to 3× as wide, because they too meet the extremes of the noise.

**Post-processing** that makes the shares non-negative (``norm-sub``) is applied to the
reported histogram only (``FittedDistribution.shares``): shifting every positive share to
make room for clipped ones moves the bulk of the distribution, and read from such shares the
CDF, quantiles, ranges and mean were worse than the unbiased ones (W1 3.5–11×, p50 RMSE 17×
in an audit). The answer names what it post-processed in ``extra["postprocessed"]``.
"""

from __future__ import annotations

import math
import sys
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from chorus_collector.estimators.base import Estimator, M, Query, QueryError
from chorus_collector.estimators.consistency import LABELS
from chorus_collector.results.distribution import DistributionEstimate, Statistic
from chorus_collector.results.estimates import Z95
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms.distribution import DistributionMechanism

__all__ = ["DistributionEstimator", "FittedDistribution", "answer", "quantile_of",
           "tree_quantile"]

Z = Z95
#: How each method is named in an answer's ``postprocessing`` (the others: ``LABELS``).
DISTRIBUTION_LABELS = {
    "none": "none (unbiased)",
    "ems": "ems: expectation-maximisation with (1,2,1)/4 smoothing (biased, smooth)",
    "em": "em: maximum likelihood by expectation-maximisation (biased)",
}


@dataclass(frozen=True)
class FittedDistribution:
    """Fitted bucket shares and their uncertainty: a covariance, or a reason for none."""

    mechanism: DistributionMechanism
    n: int
    #: θ̂: (D,) estimated share of each bucket. Sums to 1; may hold small negative shares
    #: where the estimator is unbiased (hierarchical histograms).
    leaves: np.ndarray
    #: (D, D) covariance of θ̂, for estimators linear in the report counts.
    covariance: np.ndarray | None = None
    #: Why the fit states no uncertainty (no covariance): every answer then has no standard
    #: error and no interval (None), and says this reason. Square Wave: its bootstrap's
    #: intervals did not cover (issue 34).
    no_intervals: str | None = None
    #: How θ̂ was fitted, and how its uncertainty was computed, in words.
    method: str = ""
    uncertainty: str = ""
    variance_model: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: The branching factor of the tree θ̂ was fitted on (D = B^h leaves), if any: quantiles
    #: are then read by :func:`tree_quantile`.
    branching: int | None = None
    #: Post-processed bucket shares, shown in the histogram only; every other answer reads
    #: ``leaves``. None: the histogram shows ``leaves``.
    shares: np.ndarray | None = None

    def __post_init__(self) -> None:
        if (self.covariance is None) == (self.no_intervals is None):
            raise ValueError("a fitted distribution has a covariance or says why it has none "
                             "(no_intervals), not both")
        if self.branching is not None and self.branching ** round(
                math.log(len(self.leaves)) / math.log(self.branching)) != len(self.leaves):
            raise ValueError(f"{len(self.leaves)} leaves are not a power of the branching "
                             f"factor {self.branching}")


class DistributionEstimator(Estimator[M]):
    """The collector half of a distribution mechanism: ``fit`` the bucket shares from the
    merged statistic; ``finalize`` answers the query from the fit."""

    @abstractmethod
    def fit(self, mechanism: M, n: int, state: np.ndarray, method: str,
            uncertainty: bool = True) -> FittedDistribution:
        """θ̂ and its uncertainty; ``uncertainty=False`` skips the (costly) uncertainty and
        returns a zero covariance (benchmarks read only θ̂)."""

    def method_of(self, query: Query) -> str:
        """The query's post-processing, or this estimator's default where it names one this
        estimator does not offer (internal callers build ``Query()`` with "none")."""
        method = query.postprocessing
        return method if method in self.postprocessing else self.default_postprocessing

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> DistributionEstimate:
        mechanism = self.mechanism_of(campaign)
        if n == 0:
            raise QueryError("invalid-batch-size", "there are no reports in this window to "
                                                   "estimate a distribution from")
        method = self.method_of(query)
        fitted = _cached_fit(self, mechanism, n, method,
                             np.asarray(state, dtype=np.int64).tobytes())
        return answer(campaign, fitted, query, postprocessing=DISTRIBUTION_LABELS.get(
            method, LABELS.get(method, method)))


# 64 fits (hierarchical histograms hold a D × D covariance each: 0.5 MB at D = 256). A
# closed time bucket's statistic never changes, so a dashboard that reloads a series, or a
# comparison that reads a window the series already fitted, does not refit it.
@lru_cache(maxsize=64)
def _cached_fit(estimator: DistributionEstimator[Any], mechanism: DistributionMechanism,
                n: int, method: str, state: bytes) -> FittedDistribution:
    # Matrix products of a few hundred rows gain nothing from BLAS threads, and beside other
    # queries and workers a threaded BLAS oversubscribes the cores: Square Wave's former bootstrap
    # took 8–16 s instead of 0.9 s on a busy two-core machine.
    with _blas_controller().limit(limits=1, user_api="blas"):
        return estimator.fit(mechanism, n, np.frombuffer(state, dtype=np.int64), method)


def _blas_controller() -> ThreadpoolController:
    """The process's thread pools, found once: ``threadpool_limits`` looks for them in every
    loaded library each time (a few milliseconds a fit, a third of a small fit's time). Found
    again when a module loaded since may have brought a pool of its own."""
    global _controller, _controller_modules
    if _controller is None or len(sys.modules) != _controller_modules:
        _controller, _controller_modules = ThreadpoolController(), len(sys.modules)
    return _controller


_controller: ThreadpoolController | None = None
_controller_modules = 0  # how many modules were loaded when _controller looked


def _unit_edges(buckets: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, buckets + 1)


def _bucket_means(mechanism: DistributionMechanism) -> np.ndarray:
    """E[x | x in bucket j], x uniform on the campaign's scale inside the bucket."""
    edges = np.asarray(mechanism.edges(), dtype=np.float64)
    low, high = edges[:-1], edges[1:]
    means: np.ndarray = (high - low) / np.log(high / low) if mechanism.scale == "log" \
        else (low + high) / 2
    return means


def _range_weights(mechanism: DistributionMechanism, a: float, b: float) -> np.ndarray:
    """r with r·θ = the share in [a, b]: 1 for buckets inside, the covered fraction (on the
    campaign's scale) for the two it cuts."""
    u_a, u_b = mechanism.to_unit(mechanism.domain.clip(a)), \
        mechanism.to_unit(mechanism.domain.clip(b))
    edges = _unit_edges(mechanism.buckets)
    covered: np.ndarray = np.clip(np.minimum(edges[1:], u_b) - np.maximum(edges[:-1], u_a),
                                  0.0, None)
    return covered * mechanism.buckets


def _isotonic(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest ``values`` in least squares (pool adjacent
    violators). Unlike a running maximum, which lifts every point after a high one and so
    biases upper quantiles low, it averages the violators."""
    means: list[float] = []
    sizes: list[int] = []
    for value in values.tolist():
        mean, size = value, 1
        while means and means[-1] > mean:
            previous, count = means.pop(), sizes.pop()
            mean = (previous * count + mean * size) / (count + size)
            size += count
        means.append(mean)
        sizes.append(size)
    return np.repeat(np.array(means), sizes)


def _monotone_cdf(cumulative: np.ndarray) -> np.ndarray:
    """Isotonic regression along the last axis, clipped to [0, 1]."""
    rows = np.atleast_2d(cumulative)
    fitted = np.array([_isotonic(row) for row in rows]).reshape(cumulative.shape)
    clipped: np.ndarray = np.clip(fitted, 0.0, 1.0)
    return clipped


def _crossing(levels: np.ndarray, q: float) -> float:
    """The first u ∈ [0, 1] where the piecewise-linear curve through (i/D, levels[i]),
    i = 0 … D, reaches q (1 if it never does). ``levels`` is non-decreasing."""
    buckets = len(levels) - 1
    index = int(np.searchsorted(levels, q, side="left"))
    if index > buckets:
        return 1.0
    if index == 0:
        return 0.0
    below, above = levels[index - 1], levels[index]
    inside = (q - below) / (above - below) if above > below else 0.0
    return (index - 1 + inside) / buckets


def quantile_of(cdf_at_edges: np.ndarray, q: float) -> float:
    """The q-quantile, on the unit scale, of a monotone CDF given at the D + 1 edges."""
    return _crossing(cdf_at_edges, q)


def tree_quantile(cumulative: np.ndarray, q: float, branching: int) -> float:
    """The q-quantile, on the unit scale, of F̂ given at the D + 1 edges (D = B^h, F̂ not
    necessarily monotone), read by walking down the B-ary tree over the leaves (CKS 2019;
    MECHANISMS-2.md §1.2): from the root, descend into the first child at whose upper edge
    F̂ reaches q (the last child if none does), and interpolate linearly inside the leaf."""
    levels = np.asarray(cumulative, dtype=np.float64)
    start, end = 0, len(levels) - 1
    while end - start > 1:
        size = (end - start) // branching
        reached = np.flatnonzero(levels[start + size:end + 1:size] >= q)
        child = int(reached[0]) if reached.size else branching - 1
        start, end = start + child * size, start + (child + 1) * size
    below, above = float(levels[start]), float(levels[end])
    if above > below:
        inside = min(max((q - below) / (above - below), 0.0), 1.0)
    else:  # a leaf estimated at ≤ 0: the quantile sits at whichever edge reaches q
        inside = 0.0 if above >= q else 1.0
    return (start + inside) / (len(levels) - 1)


def _with_zero(cumulative: np.ndarray) -> np.ndarray:
    zero = np.zeros((*cumulative.shape[:-1], 1))
    return np.concatenate([zero, cumulative], axis=-1)


def _linear_answers(fitted: FittedDistribution, weights: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, std error, low, high) of each row of ``weights`` · θ; ``None`` stands for
    the identity (each bucket's own share)."""
    rows = np.eye(fitted.mechanism.buckets) if weights is None else weights
    point = rows @ fitted.leaves
    if fitted.no_intervals is not None:
        unknown = np.full(point.shape, np.nan)  # no uncertainty: None in the answer
        return point, unknown, unknown, unknown
    assert fitted.covariance is not None
    # rᵀΣr for each row r. A three-operand einsum would loop over rows·D² terms, O(D³) for
    # the histogram: about a minute at D = 4096, where the diagonal is free.
    variance = np.diag(fitted.covariance).copy() if weights is None else \
        np.einsum("ij,ij->i", rows @ fitted.covariance, rows)
    error = np.sqrt(np.clip(variance, 0.0, None))
    return point, error, point - Z * error, point + Z * error


def _cdf_band(fitted: FittedDistribution) -> tuple[np.ndarray, np.ndarray]:
    """(F̂ at the D + 1 edges, its standard error there), F̂ raw (not yet monotone)."""
    cumulative = _with_zero(np.cumsum(fitted.leaves))
    if fitted.covariance is not None:
        prefix = np.cumsum(np.cumsum(fitted.covariance, axis=0), axis=1)
        error = np.sqrt(np.clip(np.diag(prefix), 0.0, None))
    else:  # no intervals: None in the answer
        error = np.full(len(fitted.leaves), np.nan)
    return cumulative, _with_zero(error)


def _quantiles(fitted: FittedDistribution, levels: Sequence[float], cumulative: np.ndarray,
               error: np.ndarray, monotone: np.ndarray) -> list[Statistic]:
    """Each level's quantile, from the CDF at the edges (raw and monotone) and its standard
    errors there (as ``answer`` computed them for the CDF rows)."""
    mechanism = fitted.mechanism
    rows = []
    for q in levels:
        if fitted.no_intervals is not None:
            rows.append(Statistic(value=mechanism.from_unit(quantile_of(monotone, q)),
                                  std_error=None, ci_low=None, ci_high=None, q=q))
            continue
        if fitted.branching is not None:
            unit, low_unit, high_unit = _tree_interval(cumulative, error, q, fitted.branching)
            low, high = mechanism.from_unit(low_unit), mechanism.from_unit(high_unit)
            spread = (high - low) / (2 * Z)
        else:
            unit = quantile_of(monotone, q)
            # Without a tree: the band's envelopes, from the first t whose upper band F̃ + zσ
            # reaches q to the last whose lower band F̃ − zσ is below it (conservative).
            upper_band = np.maximum.accumulate(np.clip(monotone + Z * error, 0.0, 1.0))
            lower_band = np.minimum.accumulate(
                np.clip(monotone - Z * error, 0.0, 1.0)[::-1])[::-1]
            low_unit, high_unit = _crossing(upper_band, q), _crossing(lower_band, q)
            low, high = mechanism.from_unit(low_unit), mechanism.from_unit(high_unit)
            spread = (high - low) / (2 * Z)
        rows.append(Statistic(value=mechanism.from_unit(unit), std_error=spread, ci_low=low,
                              ci_high=high, q=q))
    return rows


def _tree_interval(cumulative: np.ndarray, error: np.ndarray, q: float, branching: int
                   ) -> tuple[float, float, float]:
    """(quantile, low, high) on the unit scale: the tree walk on F̂ and on its band F̂ ± zσ.
    The walk on the upper band stops where F̂(t) + zσ(t) first reaches q at the nodes it
    visits, so it is above the true quantile t* about as often as F̂(t*) + zσ(t*) < q, 2.5%;
    likewise the lower band's (measured 94.5–98.5% coverage, docs/mechanisms/distributions.md).
    Where F̂ − zσ stays below q up to the top of the range the upper end is the top: the
    data cannot place the quantile below it."""
    unit = tree_quantile(cumulative, q, branching)
    low = tree_quantile(cumulative + Z * error, q, branching)
    high = tree_quantile(cumulative - Z * error, q, branching)
    return unit, min(low, unit), max(high, unit)


def answer(campaign: Campaign, fitted: FittedDistribution, query: Query,
           postprocessing: str) -> DistributionEstimate:
    """Every answer a distribution campaign gives, from one fit."""
    mechanism = fitted.mechanism
    edges = mechanism.edges()
    buckets = mechanism.buckets
    point, error, low, high = _linear_answers(fitted, None)
    if fitted.shares is not None:
        # Post-processed shares are biased: they carry the unbiased estimate's standard error
        # and its interval intersected with [0, 1] (every share lies there, so it keeps its
        # coverage), as the frequency estimates' post-processing does.
        point, low, high = fitted.shares, np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
    histogram = [Statistic(value=v, std_error=e, ci_low=lo, ci_high=hi, lo=edges[j],
                           hi=edges[j + 1])
                 for j, (v, e, lo, hi) in enumerate(zip(
                     point.tolist(), _knowns(error), _knowns(low), _knowns(high), strict=True))]

    cumulative, cdf_error = _cdf_band(fitted)
    monotone = _monotone_cdf(cumulative)
    inner, inner_error = monotone[1:buckets + 1], cdf_error[1:buckets + 1]
    # np.maximum and np.minimum keep a NaN (no interval); max/min would not.
    cdf = [Statistic(value=v, std_error=e, ci_low=lo, ci_high=hi, hi=edge)
           for v, e, lo, hi, edge in zip(
               inner.tolist(), _knowns(inner_error),
               _knowns(np.maximum(0.0, inner - Z * inner_error)),
               _knowns(np.minimum(1.0, inner + Z * inner_error)), edges[1:], strict=True)]

    ranges = []
    if query.ranges:
        weights = np.array([_range_weights(mechanism, a, b) for a, b in query.ranges])
        point, error, low, high = _linear_answers(fitted, weights)
        ranges = [Statistic(value=float(point[i]), std_error=_known(error[i]),
                            ci_low=_known(low[i]), ci_high=_known(high[i]), lo=a, hi=b)
                  for i, (a, b) in enumerate(query.ranges)]

    means = _bucket_means(mechanism)
    point, error, low, high = _linear_answers(fitted, means[None, :])
    mean = Statistic(value=float(point[0]), std_error=_known(error[0]),
                     ci_low=_known(low[0]), ci_high=_known(high[0]))

    extra = {**fitted.extra,
             "mean_note": "read from the histogram: values are taken as uniform inside each "
                          "bucket, so it can be off by up to half a bucket's width",
             "cdf_note": "the isotonic (least-squares non-decreasing) fit of the cumulative "
                         "shares, clipped to [0, 1]",
             "postprocessed": ["histogram"] if fitted.shares is not None else [],
             "postprocessed_note": "the statistics the post-processing changed; every other "
                                   "answer (CDF, quantiles, ranges, mean) reads the fit "
                                   "before it" if fitted.shares is not None else
                                   "no statistic is post-processed beyond the fit"}
    if fitted.branching is not None:
        extra["quantile_note"] = (
            f"read by walking down the fit's tree (B = {fitted.branching}): at each node, the "
            "first child whose upper edge has an estimated CDF >= q; the interval by the same "
            "walk on the CDF's 95% pointwise band")
    if query.ranges:
        extra["range_alignment"] = [
            _on_edge(mechanism, a) and _on_edge(mechanism, b) for a, b in query.ranges]
    return DistributionEstimate(
        campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon,
        n=fitted.n, edges=edges, scale=mechanism.scale, histogram=histogram, cdf=cdf,
        quantiles=_quantiles(fitted, query.quantiles, cumulative, cdf_error, monotone),
        ranges=ranges,
        mean=mean,
        variance_model=fitted.variance_model, method=fitted.method,
        uncertainty=fitted.uncertainty, window=query.window, postprocessing=postprocessing,
        extra=extra, warnings=list(fitted.warnings))


def _known(value: float) -> float | None:
    """A standard error or an interval's end, None where the fit states none (NaN)."""
    return None if math.isnan(value) else float(value)


def _knowns(values: np.ndarray) -> list[float | None]:
    """``_known`` of each (Python floats first: a numpy scalar each costs ten times more)."""
    return [None if math.isnan(value) else value for value in values.tolist()]


def _on_edge(mechanism: DistributionMechanism, value: float) -> bool:
    """Whether ``value`` falls on a bucket edge (a range between edges is split exactly)."""
    unit = mechanism.to_unit(mechanism.domain.clip(value)) * mechanism.buckets
    return math.isclose(unit, round(unit), abs_tol=1e-9)
