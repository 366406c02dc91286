"""Subset Selection: how often each category was in a reported subset (``bincount``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import SubsetSelection


class SubsetEstimator(PureEstimator[SubsetSelection]):
    name: ClassVar[str] = "ss"
    mechanism_type: ClassVar[MechanismTypes] = SubsetSelection

    def state_size(self, mechanism: SubsetSelection) -> int:
        return mechanism.d

    def map(self, mechanism: SubsetSelection, payloads: Sequence[Any]) -> np.ndarray:
        flat = np.fromiter((i for subset in payloads for i in subset), dtype=np.int64)
        return np.bincount(flat, minlength=mechanism.d).astype(np.int64)
