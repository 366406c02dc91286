"""dBitFlip (Ding, Kulkarni, Yekhanin 2017), decoded with DKY's conditional estimator
(MECHANISMS.md §10).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.common import BinomialCounts
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms import DBitFlip


class DBitFlipEstimator(PureEstimator[DBitFlip]):
    """DKY's estimator (MECHANISMS.md §10.2), which conditions on the buckets users sampled.

    State: [C_v, S_v] per bucket: how often v was sampled with its bit at 1, and how often it
    was sampled at all. With z the per-bit odds and W_u = (d/b)·1[v sampled by u]·(b_uv(z + 1)
    − 1)/(z − 1), f̂_v = Σ_u W_u/n = (d/(n b))·(C_v(z + 1) − S_v)/(z − 1): unbiased, and below
    the pure-protocol estimator's variance, which replaces S_v by its mean n·b/d. Exact variance
    (fixed population): (1/n²)·[Σ_{x_u ≠ v} (d/b)·z/(z − 1)² + Σ_{x_u = v} ((d/b)·(z² − z + 1)
    /(z − 1)² − 1)]; the standard error is its i.i.d.-sampling plug-in.
    """

    name: ClassVar[str] = "dbitflip"
    mechanism_type: ClassVar[MechanismTypes] = DBitFlip

    def state_size(self, mechanism: DBitFlip) -> int:
        return 2 * mechanism.d

    def map(self, mechanism: DBitFlip, payloads: Sequence[Any]) -> np.ndarray:
        d = mechanism.d
        ones = np.fromiter((j for p in payloads for j, bit in zip(p["buckets"], p["bits"],
                                                                    strict=True) if bit),
                           dtype=np.int64)
        sampled = np.fromiter((j for p in payloads for j in p["buckets"]), dtype=np.int64)
        return np.concatenate([np.bincount(ones, minlength=d),
                               np.bincount(sampled, minlength=d)]).astype(np.int64)

    def support_counts(self, mechanism: DBitFlip, state: np.ndarray) -> np.ndarray:
        return state[:mechanism.d].astype(np.float64)

    def likelihood(self, mechanism: DBitFlip, state: np.ndarray,
                   counts: np.ndarray) -> BinomialCounts:
        """Given S_v reports sampled v, C_v ~ Bin(S_v, (1 − p_bit) + (2p_bit − 1)·f_v): a
        sampling user holds v with probability f_v, whatever it sampled. ``mle`` on the pure
        support counts (Bin(n, p*·f_v + q*·(1 − f_v))) ignored S_v, as the pure estimator does,
        and raised the error summed over all values 1.23× on a flat population at n = 10⁵
        (d = 32, ε = 1) where DKY's estimator is much better than the pure one."""
        sampled = state[mechanism.d:].astype(np.float64)
        return BinomialCounts(counts, sampled, mechanism.p_bit, 1.0 - mechanism.p_bit)

    def frequencies(self, mechanism: DBitFlip, n: int, state: np.ndarray,
                    counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = mechanism.odds
        scale = mechanism.d / mechanism.b
        sampled = state[mechanism.d:].astype(np.float64)
        frequency = scale * (counts * (z + 1) - sampled) / (z - 1) / max(n, 1)
        # Plug-in i.i.d. variance of W_u, with the sampling rate b/d known exactly and the rate
        # of ones among sampled reports clipped to its possible range [1/(z + 1), z/(z + 1)]
        # (so that a bucket reported rarely by chance does not get a tiny standard error).
        ones_rate = np.clip(np.divide(counts, sampled, out=np.full_like(counts, 0.5),
                                      where=sampled > 0), 1 / (z + 1), z / (z + 1))
        share = (ones_rate * (z + 1) - 1) / (z - 1)
        variance = scale * (ones_rate * z * z + 1 - ones_rate) / (z - 1) ** 2 - share**2
        return frequency, np.sqrt(variance / max(n, 1))
