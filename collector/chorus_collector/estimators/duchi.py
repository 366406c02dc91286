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

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import mean_estimate, sample_std_error
from chorus_collector.results.estimates import MeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import Duchi


class DuchiEstimator(Estimator[Duchi]):
    name: ClassVar[str] = "duchi"
    mechanism_type: ClassVar[MechanismTypes] = Duchi

    def state_size(self, mechanism: Duchi) -> int:
        return 2  # [number of 0 bits, number of 1 bits]

    def map(self, mechanism: Duchi, payloads: Sequence[Any]) -> np.ndarray:
        bits = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(bits, minlength=2).astype(np.int64)

    def moments(self, mechanism: Duchi, state: np.ndarray) -> tuple[float, float]:
        """(Σ t*, Σ t*²) over the reports: t* = ±C_ε."""
        c = mechanism.c
        ones, zeros = float(state[1]), float(state[0])
        return c * (ones - zeros), c * c * (ones + zeros)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        mechanism = self.mechanism_of(campaign)
        total, squares = self.moments(mechanism, state)
        return mean_estimate(campaign, n, total / n, sample_std_error(total, squares, n),
                             query, worst_case_std_error=mechanism.c / math.sqrt(n))


class OneBitMeanEstimator(DuchiEstimator):
    """DKY's μ̂ = (m/n)·Σ (b(e^ε + 1) − 1)/(e^ε − 1) is Duchi's mean after t = 2x/m − 1."""

    name: ClassVar[str] = "one_bit_mean"
