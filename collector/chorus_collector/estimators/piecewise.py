"""Piecewise and Hybrid Mechanism means (Wang et al., ICDE 2019): the mean of the debiased
reports, with the sample-variance standard error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import mean_estimate, sample_std_error
from chorus_collector.results.estimates import MeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import HybridMechanism, PiecewiseMechanism


class PiecewiseEstimator(Estimator[PiecewiseMechanism]):
    """The Piecewise Mechanism's mean: reports are grid indices k, t* = k·Λ.

    Statistic [Σk, Σk²] (exact integers). The mean of the t* is unbiased for the mean of the
    clipped values; the SE is the sample variance of the t* over n (i.i.d. sampling).
    """

    name: ClassVar[str] = "pm"
    mechanism_type: ClassVar[MechanismTypes] = PiecewiseMechanism

    def state_size(self, mechanism: PiecewiseMechanism) -> int:
        return 2

    def map(self, mechanism: PiecewiseMechanism, payloads: Sequence[Any]) -> np.ndarray:
        k = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.array([k.sum(), (k * k).sum()], dtype=np.int64)

    def moments(self, mechanism: PiecewiseMechanism, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: t* = k·Λ."""
        step = mechanism.step
        return step * int(state[0]), step * step * int(state[1])

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        total, squares = self.moments(self.mechanism_of(campaign), state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n), query)


class HybridEstimator(Estimator[HybridMechanism]):
    """The Hybrid Mechanism's mean: [Σk, Σk², Duchi ones, Duchi zeros]; each report stands for
    t* = k·Λ (Piecewise part) or ±C_ε (Duchi part), unbiased for t either way."""

    name: ClassVar[str] = "hm"
    mechanism_type: ClassVar[MechanismTypes] = HybridMechanism

    def state_size(self, mechanism: HybridMechanism) -> int:
        return 4

    def map(self, mechanism: HybridMechanism, payloads: Sequence[Any]) -> np.ndarray:
        kinds = np.fromiter((p[0] for p in payloads), dtype=np.int64, count=len(payloads))
        values = np.fromiter((p[1] for p in payloads), dtype=np.int64, count=len(payloads))
        grid = values[kinds == 0]
        bits = values[kinds == 1]
        return np.array([grid.sum(), (grid * grid).sum(), bits.sum(), len(bits) - bits.sum()],
                        dtype=np.int64)

    def moments(self, mechanism: HybridMechanism, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: k·Λ or ±C_ε."""
        step, c = mechanism.step, mechanism.duchi_c
        total = step * int(state[0]) + c * (int(state[2]) - int(state[3]))
        squares = step * step * int(state[1]) + c * c * (int(state[2]) + int(state[3]))
        return total, squares

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        total, squares = self.moments(self.mechanism_of(campaign), state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n), query)
