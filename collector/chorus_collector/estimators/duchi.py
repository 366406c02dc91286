"""Mean estimation from Duchi et al.'s one-bit reports (MECHANISMS.md §9.2).

Each report b ∈ {0, 1} stands for t* = C_ε(2b − 1), an unbiased estimate of the user's t; the
mean of the t* is unbiased for the mean of t, then mapped back to [lo, hi].

Standard error: the sample variance of the t* over n (i.i.d.-sampling model). The
fixed-population variance (C_ε² − mean t²)/n needs the mean square of the true values, which
one-bit reports cannot estimate (MECHANISMS.md §16.7); the sample variance is the usual choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, Query
from chorus_collector.results import MeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.domain import NumericRange
from chorus_shared.mechanisms import Duchi, HybridMechanism, Mechanism, PiecewiseMechanism

__all__ = ["DuchiEstimator", "HybridEstimator", "OneBitMeanEstimator", "PiecewiseEstimator"]

VARIANCE_MODEL = "iid-sampling: sample variance of the debiased reports"


def mean_estimate(campaign: Campaign, n: int, mean_t: float, se_t: float, query: Query,
                  **extra: Any) -> MeanEstimate:
    """A mean of debiased reports t* ∈ [−1, 1] scale, mapped back to [lo, hi]."""
    mechanism = campaign.mechanism
    domain = mechanism.domain
    assert isinstance(domain, NumericRange)
    scale = (domain.hi - domain.lo) / 2
    return MeanEstimate.from_mean(
        mean=domain.lo + scale * (mean_t + 1), std_error=scale * se_t, campaign=campaign.name,
        mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
        variance_model=VARIANCE_MODEL, window=query.window,
        extra={"clipping": f"values were clipped to [{domain.lo:g}, {domain.hi:g}] on the "
                           "device", **{k: scale * v for k, v in extra.items()}},
    )


def sample_std_error(total: float, squares: float, n: int) -> float:
    """SE of the mean of n values from their sum and sum of squares (sample variance)."""
    if n <= 1:
        return math.inf
    return math.sqrt(max(squares - total * total / n, 0.0) / (n - 1) / n)


class DuchiEstimator(Estimator):
    name: ClassVar[str] = "duchi"

    def state_size(self, mechanism: Mechanism) -> int:
        return 2  # [number of 0 bits, number of 1 bits]

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        bits = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(bits, minlength=2).astype(np.int64)

    def moments(self, mechanism: Mechanism, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: t* = ±C_ε."""
        assert isinstance(mechanism, Duchi)
        c = mechanism.c
        ones, zeros = float(state[1]), float(state[0])
        return c * (ones - zeros), c * c * (ones + zeros)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        mechanism = campaign.mechanism
        assert isinstance(mechanism, Duchi)
        total, squares = self.moments(mechanism, state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n),
                             query, worst_case_std_error=mechanism.c / math.sqrt(n))


class OneBitMeanEstimator(DuchiEstimator):
    """DKY's μ̂ = (m/n)·Σ (b(e^ε + 1) − 1)/(e^ε − 1) is Duchi's mean after t = 2x/m − 1."""

    name: ClassVar[str] = "one_bit_mean"


class PiecewiseEstimator(Estimator):
    """The Piecewise Mechanism's mean: reports are grid indices k, t* = k·Λ.

    Statistic [Σk, Σk²] (exact integers). The mean of the t* is unbiased for the mean of the
    clipped values; the SE is the sample variance of the t* over n (i.i.d. sampling).
    """

    name: ClassVar[str] = "pm"

    def state_size(self, mechanism: Mechanism) -> int:
        return 2

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        k = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.array([k.sum(), (k * k).sum()], dtype=np.int64)

    def moments(self, mechanism: Mechanism, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: t* = k·Λ."""
        assert isinstance(mechanism, PiecewiseMechanism)
        step = mechanism.step
        return step * int(state[0]), step * step * int(state[1])

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        total, squares = self.moments(campaign.mechanism, state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n), query)


class HybridEstimator(Estimator):
    """The Hybrid Mechanism's mean: [Σk, Σk², Duchi ones, Duchi zeros]; each report stands for
    t* = k·Λ (Piecewise part) or ±C_ε (Duchi part), unbiased for t either way."""

    name: ClassVar[str] = "hm"

    def state_size(self, mechanism: Mechanism) -> int:
        return 4

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        kinds = np.fromiter((p[0] for p in payloads), dtype=np.int64, count=len(payloads))
        values = np.fromiter((p[1] for p in payloads), dtype=np.int64, count=len(payloads))
        grid = values[kinds == 0]
        bits = values[kinds == 1]
        return np.array([grid.sum(), (grid * grid).sum(), bits.sum(), len(bits) - bits.sum()],
                        dtype=np.int64)

    def moments(self, mechanism: Mechanism, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: k·Λ or ±C_ε."""
        assert isinstance(mechanism, HybridMechanism)
        step, c = mechanism.step, mechanism.duchi_c
        total = step * int(state[0]) + c * (int(state[2]) - int(state[3]))
        squares = step * step * int(state[1]) + c * c * (int(state[2]) + int(state[3]))
        return total, squares

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        total, squares = self.moments(campaign.mechanism, state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n), query)
