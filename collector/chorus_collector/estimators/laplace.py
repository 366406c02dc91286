"""Mean estimation from discrete Laplace reports (MECHANISMS.md §9.1).

Each report y ∈ [−B, R + B] stands for t* = 2y/R − 1, unbiased for the user's t. Statistic
[Σy, Σy²] in exact integers (the mechanism bounds the span so that they fit 64 bits); the
standard error is the sample variance of the t* over n (i.i.d.-sampling model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import mean_estimate, sample_std_error
from chorus_collector.results.estimates import MeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import LaplaceMechanism

__all__ = ["LaplaceEstimator"]


class LaplaceEstimator(Estimator[LaplaceMechanism]):
    name: ClassVar[str] = "laplace"
    mechanism_type: ClassVar[MechanismTypes] = LaplaceMechanism

    def state_size(self, mechanism: LaplaceMechanism) -> int:
        return 2

    def map(self, mechanism: LaplaceMechanism, payloads: Sequence[Any]) -> np.ndarray:
        y = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.array([y.sum(), (y * y).sum()], dtype=np.int64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> MeanEstimate:
        mechanism = self.mechanism_of(campaign)
        unit = 2 / mechanism.resolution  # t* = unit·y − 1
        total, squares = int(state[0]), int(state[1])
        mean_t = unit * total / n - 1 if n else 0.0
        return mean_estimate(campaign, n, mean_t,
                             unit * sample_std_error(float(total), float(squares), n), query)
