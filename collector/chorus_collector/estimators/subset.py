"""Subset Selection: how often each category was in a reported subset (``bincount``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import Mechanism, PureOracle


class SubsetEstimator(PureEstimator):
    name: ClassVar[str] = "ss"

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, PureOracle)
        return mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, PureOracle)
        flat = np.fromiter((i for subset in payloads for i in subset), dtype=np.int64)
        return np.bincount(flat, minlength=mechanism.d).astype(np.int64)
