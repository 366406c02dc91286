"""Unary encoding (SUE, OUE): the statistic is [count of reports with bit i set, for every i]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.common import unpack_bits
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms.unary import UnaryEncoding


class UnaryEstimator(PureEstimator[UnaryEncoding]):
    name: ClassVar[str] = "sue"
    mechanism_type: ClassVar[MechanismTypes] = UnaryEncoding

    def state_size(self, mechanism: UnaryEncoding) -> int:
        return mechanism.d

    def map(self, mechanism: UnaryEncoding, payloads: Sequence[Any]) -> np.ndarray:
        if not payloads:
            return np.zeros(mechanism.d, dtype=np.int64)
        bits = unpack_bits([p["bits"] for p in payloads], mechanism.d)
        summed: np.ndarray = bits.sum(axis=0, dtype=np.int64)
        return summed


class OUEEstimator(UnaryEstimator):
    name: ClassVar[str] = "oue"
