"""Per-report variances of each mechanism, as the designer predicts them.

Variance model: i.i.d. sampling of users (MECHANISMS.md §0), the one the estimators' standard
errors use, so the designer predicts the SE an analyst will read. Per report, with
λ = q* + f(p* − q*) the rate at which a report supports a category of share f, a pure oracle
gives n·Var[f̂] = λ(1 − λ)/(p* − q*)² (at f → 0, the Var* of ``mechanism: "auto"``). A mean
gives E[v(t)] + Var[t] with v the mechanism's variance given t ∈ [−1, 1]; every v here is
a + b·t², so the worst case over distributions on [−1, 1] is max(v(0), v(1) + 1).

Each of these is v̄ + S²: the mechanism's average noise per report plus the spread of the
values between users. A plan over time (``planning``) needs the two apart, for the exact
variance of a period's mean, (v̄ + S²)·E[1/m] − S²/N (:func:`split_variance`).
"""

from __future__ import annotations

import math

from chorus_shared.mechanisms import (
    CountMeanSketch,
    DBitFlip,
    Duchi,
    DuchiMultidim,
    HadamardCountMeanSketch,
    HybridMechanism,
    LaplaceMechanism,
    Mechanism,
    PiecewiseMechanism,
    PureOracle,
)
from chorus_shared.mechanisms.multidim import SampledAttributes

__all__ = ["frequency_variance", "mean_variance", "report_variance", "split_variance"]


def frequency_variance(mechanism: Mechanism, frequency: float) -> float | None:
    """n·Var[f̂] for a category of share ``frequency``, i.i.d. model; None when the estimate
    depends on more than the mechanism (RAPPOR-like decoding against candidates)."""
    f = frequency
    if isinstance(mechanism, DBitFlip):  # DKY's estimator, which the collector uses
        z, scale = mechanism.odds, mechanism.d / mechanism.b
        ones = (1 + (z - 1) * f) / (z + 1)
        return scale * (ones * z * z + 1 - ones) / (z - 1) ** 2 - f * f
    if isinstance(mechanism, PureOracle):
        p, q = mechanism.support_probabilities()
        rate = q + f * (p - q)
        return rate * (1 - rate) / (p - q) ** 2
    if isinstance(mechanism, CountMeanSketch):
        m, c = mechanism.m, mechanism.c
        theta = f + (1 - f) / m  # E[Z]: 1 for the value itself, 1/m for the others on average
        per_report = c * c - theta * theta if isinstance(mechanism, HadamardCountMeanSketch) \
            else (c * c - 1) / 4 + theta * (1 - theta)
        return (m / (m - 1)) ** 2 * per_report
    return None


def report_variance(mechanism: Mechanism, t: float, *, bound: bool = False) -> float:
    """Var[t* | t] of one report on the [−1, 1] scale (one attribute of a vector): exact where
    the mechanism gives it, else (or with ``bound``) its upper bound, which adds at most the
    rounding to the public grid (Λ²/4)."""
    if isinstance(mechanism, DuchiMultidim):
        return mechanism.b**2 - t * t
    if isinstance(mechanism, SampledAttributes):
        return mechanism.variance_bound(t)
    if isinstance(mechanism, Duchi | LaplaceMechanism) and not bound:
        return mechanism.per_report_variance(t)
    if isinstance(mechanism, Duchi | PiecewiseMechanism | HybridMechanism | LaplaceMechanism):
        return mechanism.variance_bound(t)
    raise TypeError(f"{mechanism.name} does not estimate a mean")


def mean_variance(mechanism: Mechanism, points: list[float] | None = None,
                  weights: list[float] | None = None) -> float:
    """n·Var of a mean on the [−1, 1] scale: E[v(t)] + Var[t] over the given distribution of
    t, or the worst case over all distributions on [−1, 1] when none is given (v is a + b·t²
    for every mechanism here, so the worst is at t = 0, or t = ±1 half and half)."""
    if points is None or weights is None:
        return max(report_variance(mechanism, 0.0, bound=True),
                   report_variance(mechanism, 1.0, bound=True) + 1.0)
    mean = math.fsum(w * t for t, w in zip(points, weights, strict=True))
    return math.fsum(w * (report_variance(mechanism, t) + (t - mean) ** 2)
                     for t, w in zip(points, weights, strict=True))


def split_variance(mechanism: Mechanism, frequency: float | None) -> tuple[float, float] | None:
    """(v̄, S²) per report, the population's N/(N − 1) factor left out of S²: for a category
    of share ``frequency``, or, with None, for a mean at its worst case over [−1, 1] (all at
    t = 0, or half at −1 and half at +1, whichever is the larger). None where the variance
    depends on more than the mechanism (RAPPOR-like decoding)."""
    if frequency is not None:
        total = frequency_variance(mechanism, frequency)
        if total is None:
            return None
        spread = frequency * (1 - frequency)
        return max(0.0, total - spread), spread
    middle = report_variance(mechanism, 0.0, bound=True)
    edges = report_variance(mechanism, 1.0, bound=True)
    return (middle, 0.0) if middle >= edges + 1.0 else (edges, 1.0)
