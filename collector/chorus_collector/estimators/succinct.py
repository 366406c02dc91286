"""S-Hist (Bassily–Smith with the Hadamard matrix as its projection): the count of every
(row, bit) pair; with D_j = N_{j,1} − N_{j,0}, the support count of v is (n + (H·D)[v + 1])/2,
one transform (MECHANISMS.md §7.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.common import walsh_hadamard
from chorus_collector.estimators.consistency import Channel
from chorus_collector.estimators.hadamard import embed
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import SuccinctHistogram


@dataclass(frozen=True)
class SuccinctChannel:
    """S-Hist: A[(j, b), x] = (1/K)·(1/2 + (keep − 1/2)·s_b·H[j][x+1]), s_b = 2b − 1; output
    cell 2j + b."""

    d: int
    size: int
    keep: float

    @property
    def inputs(self) -> int:
        return self.d

    def forward(self, pi: np.ndarray) -> np.ndarray:
        signed = (self.keep - 0.5) * walsh_hadamard(embed(pi, self.size))
        half = 0.5 * pi.sum()
        out = np.empty(2 * self.size)
        out[0::2], out[1::2] = half - signed, half + signed
        result: np.ndarray = out / self.size
        return result

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        difference = walsh_hadamard(ratio[1::2] - ratio[0::2])[1:self.d + 1]
        out: np.ndarray = (0.5 * ratio.sum() + (self.keep - 0.5) * difference) / self.size
        return out


class SuccinctHistogramEstimator(PureEstimator[SuccinctHistogram]):
    """State: N[2j + b], the number of reports (row j, bit b)."""

    name: ClassVar[str] = "shist"
    mechanism_type: ClassVar[MechanismTypes] = SuccinctHistogram
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def state_size(self, mechanism: SuccinctHistogram) -> int:
        return 2 * mechanism.size

    def map(self, mechanism: SuccinctHistogram, payloads: Sequence[Any]) -> np.ndarray:
        cells = np.fromiter((2 * p["j"] + p["b"] for p in payloads), dtype=np.int64,
                            count=len(payloads))
        return np.bincount(cells, minlength=2 * mechanism.size).astype(np.int64)

    def support_counts(self, mechanism: SuccinctHistogram, state: np.ndarray) -> np.ndarray:
        pairs = state.reshape(mechanism.size, 2).astype(np.float64)
        n = float(pairs.sum())
        transformed = walsh_hadamard(pairs[:, 1] - pairs[:, 0])
        counts: np.ndarray = (n + transformed[1:mechanism.d + 1]) / 2
        return counts

    def channel(self, mechanism: SuccinctHistogram) -> Channel:
        return SuccinctChannel(mechanism.d, mechanism.size, mechanism.keep)

    def output_counts(self, mechanism: SuccinctHistogram, state: np.ndarray) -> np.ndarray | None:
        return state
