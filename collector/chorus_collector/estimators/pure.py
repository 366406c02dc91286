"""Estimation for the pure frequency oracles SUE, OUE, Subset Selection and Hadamard Response.

Each keeps the statistic its support counts come from cheapest (MECHANISMS.md §3, §7.2, §8):

* unary encoding: [n, count of reports with bit i set, for every i];
* Subset Selection: how often each category was in a reported subset (``bincount``);
* Hadamard Response: the histogram of reported y over [K]; at query time one fast
  Walsh–Hadamard transform gives every category's support count, (n + (H·N)[x + 1])/2, in
  O(K log K);
* S-Hist: the count of every (row, bit) pair; with D_j = N_{j,1} − N_{j,0}, the support count
  of v is (n + (H·D)[v + 1])/2, again one transform.

Then f̂_v = (C_v/n − q*)/(p* − q*) with the i.i.d.-sampling standard error
(``krr.pure_frequencies``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, Query
from chorus_collector.estimators.consistency import Channel
from chorus_collector.estimators.krr import frequency_estimate, pure_frequencies
from chorus_collector.estimators.rappor import unpack_bits
from chorus_collector.results import FrequencyEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import (
    DBitFlip,
    HadamardResponse,
    Mechanism,
    PureOracle,
    SuccinctHistogram,
)
from chorus_shared.mechanisms.local_hashing import _LocalHashing

__all__ = ["BLHEstimator", "DBitFlipEstimator", "HadamardChannel", "HadamardEstimator",
           "LocalHashingEstimator", "SubsetEstimator", "SuccinctChannel",
           "SuccinctHistogramEstimator", "UnaryEstimator", "support_counts", "walsh_hadamard"]


def walsh_hadamard(values: np.ndarray) -> np.ndarray:
    """H_K · values for the Sylvester Hadamard matrix, in O(K log K); along the last axis
    (a 2-D array is transformed row by row, all rows at once)."""
    out = values.astype(np.float64).copy()
    rows, size = (1, out.shape[0]) if out.ndim == 1 else out.shape
    half = 1
    while half < size:
        view = out.reshape(rows, -1, 2, half)
        top, bottom = view[:, :, 0, :].copy(), view[:, :, 1, :].copy()
        view[:, :, 0, :], view[:, :, 1, :] = top + bottom, top - bottom
        half *= 2
    return out


def _embed(pi: np.ndarray, size: int) -> np.ndarray:
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
            _embed(pi, self.size))) / 2
        return out

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        lo, hi = self.levels
        total = ratio.sum()
        out: np.ndarray = lo * total + (hi - lo) * (total + walsh_hadamard(ratio)[
            1:self.d + 1]) / 2
        return out


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
        signed = (self.keep - 0.5) * walsh_hadamard(_embed(pi, self.size))
        half = 0.5 * pi.sum()
        out = np.empty(2 * self.size)
        out[0::2], out[1::2] = half - signed, half + signed
        result: np.ndarray = out / self.size
        return result

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        difference = walsh_hadamard(ratio[1::2] - ratio[0::2])[1:self.d + 1]
        out: np.ndarray = (0.5 * ratio.sum() + (self.keep - 0.5) * difference) / self.size
        return out


class _PureEstimator(Estimator):
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "mle")

    def support_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray:
        return state.astype(np.float64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = campaign.mechanism
        assert isinstance(mechanism, PureOracle)
        counts = self.support_counts(mechanism, state)
        frequency, std_error = self.frequencies(mechanism, n, state, counts)
        return frequency_estimate(campaign, n, frequency, std_error, query,
                                  {"variance_per_user": mechanism.approximate_variance()},
                                  channel=lambda: self.channel(mechanism),
                                  output_counts=self.output_counts(mechanism, state),
                                  support_counts=counts)

    def frequencies(self, mechanism: PureOracle, n: int, state: np.ndarray,
                    counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The unbiased estimate and its standard error (the pure-protocol one by default)."""
        return pure_frequencies(counts, n, *mechanism.support_probabilities())

    def channel(self, mechanism: PureOracle) -> Channel:
        """A[y, v] = P(output y | input v) when the output histogram is sufficient (IBU)."""
        raise TypeError(f"{mechanism.name} has no output-histogram channel")

    def output_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray | None:
        return None


class UnaryEstimator(_PureEstimator):
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


class SubsetEstimator(_PureEstimator):
    name: ClassVar[str] = "ss"

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, PureOracle)
        return mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, PureOracle)
        flat = np.fromiter((i for subset in payloads for i in subset), dtype=np.int64)
        return np.bincount(flat, minlength=mechanism.d).astype(np.int64)


class HadamardEstimator(_PureEstimator):
    name: ClassVar[str] = "hr"
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def channel(self, mechanism: PureOracle) -> Channel:
        assert isinstance(mechanism, HadamardResponse)
        return HadamardChannel(mechanism.d, mechanism.size, math.exp(mechanism.eps))

    def output_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray | None:
        return state

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, HadamardResponse)
        return mechanism.size

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, HadamardResponse)
        reports = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(reports, minlength=mechanism.size).astype(np.int64)

    def support_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray:
        assert isinstance(mechanism, HadamardResponse)
        n = float(state.sum())
        transformed = walsh_hadamard(state)
        counts: np.ndarray = (n + transformed[1:mechanism.d + 1]) / 2
        return counts


class SuccinctHistogramEstimator(_PureEstimator):
    """State: N[2j + b], the number of reports (row j, bit b)."""

    name: ClassVar[str] = "shist"
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, SuccinctHistogram)
        return 2 * mechanism.size

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, SuccinctHistogram)
        cells = np.fromiter((2 * p["j"] + p["b"] for p in payloads), dtype=np.int64,
                            count=len(payloads))
        return np.bincount(cells, minlength=2 * mechanism.size).astype(np.int64)

    def support_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray:
        assert isinstance(mechanism, SuccinctHistogram)
        pairs = state.reshape(mechanism.size, 2).astype(np.float64)
        n = float(pairs.sum())
        transformed = walsh_hadamard(pairs[:, 1] - pairs[:, 0])
        counts: np.ndarray = (n + transformed[1:mechanism.d + 1]) / 2
        return counts

    def channel(self, mechanism: PureOracle) -> Channel:
        assert isinstance(mechanism, SuccinctHistogram)
        return SuccinctChannel(mechanism.d, mechanism.size, mechanism.keep)

    def output_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray | None:
        return state


class LocalHashingEstimator(_PureEstimator):
    """OLH / BLH support counts, C_v = #{u : H_u(v) = y_u}, vectorized at ingest.

    The B × d matrix ((a·v + b) mod P) mod g is built for blocks of reports sized to stay
    in cache (about 2¹⁸ cells) and spread over the cores by threads, never with a Python
    loop over reports × categories.
    """

    name: ClassVar[str] = "olh"
    BLOCK_CELLS: ClassVar[int] = 1 << 18  # 256 reports × 1024 categories: stays in cache

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, PureOracle)
        return mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, _LocalHashing)
        count = len(payloads)
        a = np.fromiter((p["a"] for p in payloads), dtype=np.int64, count=count)
        b = np.fromiter((p["b"] for p in payloads), dtype=np.int64, count=count)
        y = np.fromiter((p["y"] for p in payloads), dtype=np.int64, count=count)
        return support_counts(a, b, y, mechanism.d, mechanism.prime, mechanism.g,
                              self.BLOCK_CELLS)


class BLHEstimator(LocalHashingEstimator):
    name: ClassVar[str] = "blh"


MERSENNE_31 = (1 << 31) - 1
PARALLEL_REPORTS = 16_384  # below this, threads cost more than they save


def _count_block(a: np.ndarray, b: np.ndarray, y: np.ndarray, values: np.ndarray, prime: int,
                 g: int) -> np.ndarray:
    """Σ over one block of reports of 1[((a·v + b) mod P) mod g = y], for every v."""
    x = a[:, None] * values[None, :] + b[:, None]  # < 2⁵¹: exact in int64
    if prime == MERSENNE_31:
        # x mod (2³¹ − 1) = (x >> 31) + (x & P), then at most one subtraction: no division,
        # and the residues fit 32 bits, which halves the memory traffic of the rest.
        x = ((x >> 31) + (x & MERSENNE_31)).astype(np.uint32)  # < 2P < 2³²
        x = np.minimum(x, x - np.uint32(MERSENNE_31))  # x − P wraps around when x < P
        hashed = x & np.uint32(g - 1) if g & (g - 1) == 0 else x % np.uint32(g)
        match = hashed == y[:, None].astype(np.uint32)
    else:
        match = (x % prime % g) == y[:, None]
    counted: np.ndarray = np.count_nonzero(match, axis=0)
    return counted


def support_counts(a: np.ndarray, b: np.ndarray, y: np.ndarray, d: int, prime: int, g: int,
                   block_cells: int = 1 << 18, workers: int | None = None) -> np.ndarray:
    """Σ_u 1[((a_u·v + b_u) mod P) mod g = y_u] for every v < d.

    In blocks of about ``block_cells`` report × category cells (cache-sized), never a Python
    loop over reports × categories. numpy releases the GIL, so large batches are split across
    threads, one per core by default (``workers``).
    """
    values = np.arange(d, dtype=np.int64)
    block = max(1, block_cells // max(d, 1))
    starts = range(0, len(a), block)
    if workers is None:
        workers = (os.cpu_count() or 1) if len(a) >= PARALLEL_REPORTS else 1

    def run(start: int) -> np.ndarray:
        stop = start + block
        return _count_block(a[start:stop], b[start:stop], y[start:stop], values, prime, g)

    counts = np.zeros(d, dtype=np.int64)
    if workers <= 1 or len(starts) < 2:
        for start in starts:
            counts += run(start)
        return counts
    with ThreadPoolExecutor(min(workers, len(starts))) as pool:
        for partial in pool.map(run, starts):
            counts += partial
    return counts


class DBitFlipEstimator(_PureEstimator):
    """DKY's estimator (MECHANISMS.md §10.2), which conditions on the buckets users sampled.

    State: [C_v, S_v] per bucket: how often v was sampled with its bit at 1, and how often it
    was sampled at all. With z the per-bit odds and W_u = (d/b)·1[v sampled by u]·(b_uv(z + 1)
    − 1)/(z − 1), f̂_v = Σ_u W_u/n = (d/(n b))·(C_v(z + 1) − S_v)/(z − 1): unbiased, and below
    the pure-protocol estimator's variance, which replaces S_v by its mean n·b/d. Exact variance
    (fixed population): (1/n²)·[Σ_{x_u ≠ v} (d/b)·z/(z − 1)² + Σ_{x_u = v} ((d/b)·(z² − z + 1)
    /(z − 1)² − 1)]; the standard error is its i.i.d.-sampling plug-in.
    """

    name: ClassVar[str] = "dbitflip"

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, PureOracle)
        return 2 * mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, PureOracle)
        d = mechanism.d
        ones = np.fromiter((j for p in payloads for j, bit in zip(p["buckets"], p["bits"],
                                                                    strict=True) if bit),
                           dtype=np.int64)
        sampled = np.fromiter((j for p in payloads for j in p["buckets"]), dtype=np.int64)
        return np.concatenate([np.bincount(ones, minlength=d),
                               np.bincount(sampled, minlength=d)]).astype(np.int64)

    def support_counts(self, mechanism: PureOracle, state: np.ndarray) -> np.ndarray:
        return state[:mechanism.d].astype(np.float64)

    def frequencies(self, mechanism: PureOracle, n: int, state: np.ndarray,
                    counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(mechanism, DBitFlip)
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
