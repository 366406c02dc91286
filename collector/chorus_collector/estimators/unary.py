"""Unary encoding (SUE, OUE): the statistic is [count of reports with bit i set, for every i]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.common import unpack_bits
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import Mechanism, PureOracle


class UnaryEstimator(PureEstimator):
    name: ClassVar[str] = "sue"

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, PureOracle)
        return mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, PureOracle)
        if not payloads:
            return np.zeros(mechanism.d, dtype=np.int64)
        bits = unpack_bits([p["bits"] for p in payloads], mechanism.d)
        summed: np.ndarray = bits.sum(axis=0, dtype=np.int64)
        return summed


class OUEEstimator(UnaryEstimator):
    name: ClassVar[str] = "oue"
