"""Square Wave (Li et al., SIGMOD 2020), decoded by EM or EMS. MECHANISMS-2.md §1.1.

Skeleton: the fit is being written (issue 17).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.distribution import DistributionEstimator, FittedDistribution
from chorus_shared.mechanisms import SquareWave


class SquareWaveEstimator(DistributionEstimator[SquareWave]):
    """State: how many reports fell in each output bucket."""

    name: ClassVar[str] = "sw"
    mechanism_type: ClassVar[MechanismTypes] = SquareWave
    postprocessing: ClassVar[tuple[str, ...]] = ("ems", "em")
    default_postprocessing: ClassVar[str] = "ems"

    def state_size(self, mechanism: SquareWave) -> int:
        return mechanism.output_buckets

    def map(self, mechanism: SquareWave, payloads: Sequence[Any]) -> np.ndarray:
        return np.bincount(np.asarray(payloads, dtype=np.int64),
                           minlength=mechanism.output_buckets).astype(np.int64)

    def fit(self, mechanism: SquareWave, n: int, state: np.ndarray, method: str,
            uncertainty: bool = True) -> FittedDistribution:
        raise NotImplementedError
