"""Hierarchical histograms with level sampling, made consistent by constrained least squares
(Cormode, Kulkarni, Srivastava, PVLDB 2019; Hay et al., PVLDB 2010). MECHANISMS-2.md §1.2.

Skeleton: the fit is being written (issue 17).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.distribution import DistributionEstimator, FittedDistribution
from chorus_shared.mechanisms import HierarchicalHistogram


class HierarchicalEstimator(DistributionEstimator[HierarchicalHistogram]):
    """State: per level ℓ = 1 … h, [reports at ℓ, then each node's support count]."""

    name: ClassVar[str] = "hh"
    mechanism_type: ClassVar[MechanismTypes] = HierarchicalHistogram

    def state_size(self, mechanism: HierarchicalHistogram) -> int:
        return sum(1 + mechanism.nodes(level) for level in range(1, mechanism.height + 1))

    def map(self, mechanism: HierarchicalHistogram, payloads: Sequence[Any]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, mechanism: HierarchicalHistogram, n: int, state: np.ndarray, method: str,
            uncertainty: bool = True) -> FittedDistribution:
        raise NotImplementedError
