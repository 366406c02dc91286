"""Hadamard Response: the histogram of reported y over [K]; at query time one fast
Walsh–Hadamard transform gives every category's support count, (n + (H·N)[x + 1])/2, in
O(K log K) (MECHANISMS.md §8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.common import walsh_hadamard
from chorus_collector.estimators.consistency import Channel
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import HadamardResponse


def embed(pi: np.ndarray, size: int) -> np.ndarray:
    """π placed on columns 1..d of H_K (column 0 belongs to no category)."""
    out = np.zeros(size)
    out[1:len(pi) + 1] = pi
    return out


@dataclass(frozen=True)
class HadamardChannel:
    """HR: A[y, x] = lo + (hi − lo)·1[H[x+1][y] = +1], with 1[H = +1] = (1 + H)/2, so both
    products are one fast Walsh–Hadamard transform (O(K log K) per IBU step)."""

    d: int
    size: int
    e: float

    @property
    def inputs(self) -> int:
        return self.d

    @property
    def levels(self) -> tuple[float, float]:
        unit = 2 / (self.size * (1 + self.e))
        return unit, unit * self.e

    def forward(self, pi: np.ndarray) -> np.ndarray:
        lo, hi = self.levels
        total = pi.sum()
        out: np.ndarray = lo * total + (hi - lo) * (total + walsh_hadamard(
            embed(pi, self.size))) / 2
        return out

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        lo, hi = self.levels
        total = ratio.sum()
        out: np.ndarray = lo * total + (hi - lo) * (total + walsh_hadamard(ratio)[
            1:self.d + 1]) / 2
        return out


class HadamardEstimator(PureEstimator[HadamardResponse]):
    name: ClassVar[str] = "hr"
    mechanism_type: ClassVar[MechanismTypes] = HadamardResponse
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def channel(self, mechanism: HadamardResponse) -> Channel:
        return HadamardChannel(mechanism.d, mechanism.size, math.exp(mechanism.epsilon))

    def output_counts(self, mechanism: HadamardResponse, state: np.ndarray) -> np.ndarray | None:
        return state

    def state_size(self, mechanism: HadamardResponse) -> int:
        return mechanism.size

    def map(self, mechanism: HadamardResponse, payloads: Sequence[Any]) -> np.ndarray:
        reports = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(reports, minlength=mechanism.size).astype(np.int64)

    def support_counts(self, mechanism: HadamardResponse, state: np.ndarray) -> np.ndarray:
        n = float(state.sum())
        transformed = walsh_hadamard(state)
        counts: np.ndarray = (n + transformed[1:mechanism.d + 1]) / 2
        return counts
