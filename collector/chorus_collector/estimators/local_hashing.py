"""Local hashing (OLH, BLH): the support count of v is the number of reports whose hash of v
equals their reported value (MECHANISMS.md §4).

``support_counts`` evaluates H(v) = ((a·v + b) mod P) mod g for every report and every v < d
with no multiplication or division per cell. Write v = j·w + r with w ≈ √d; since β_r and ω_j
are below P,

    (a·v + b) mod P = β_r + ω_j − P·[β_r ≥ P − ω_j],   β_r = (a·r + b) mod P,  ω_j = a·w·j mod P.

So H(v) = y exactly when β_r mod g equals t_j = (y − ω_j) mod g if the sum does not wrap, or
t'_j = (y − ω_j + P) mod g if it does: when β_r mod g = t_j ⊕ [β_r ≥ P − ω_j]·(t_j ⊕ t'_j).
The 2√d residues β and ω of a report are built by doubling (additions and a conditional
subtraction in uint32) and reduced mod g once; each of the d cells then costs one uint32
comparison and three uint8 operations, and the matches are summed eight at a time in the
byte lanes of uint64 words. At d = 1,024 that is 0.5 ns a cell on one core of the 2-core
Xeon the benchmarks run on, where ((a·v + b) % P) % g written out in int64 takes 10 ns.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms.local_hashing import LocalHashing


class LocalHashingEstimator(PureEstimator[LocalHashing]):
    """OLH / BLH support counts, C_v = #{u : H_u(v) = y_u}, vectorized at ingest."""

    name: ClassVar[str] = "olh"
    mechanism_type: ClassVar[MechanismTypes] = LocalHashing
    BLOCK_CELLS: ClassVar[int] = 1 << 18  # report × category cells per numpy call: in L2

    def state_size(self, mechanism: LocalHashing) -> int:
        return mechanism.d

    def map(self, mechanism: LocalHashing, payloads: Sequence[Any]) -> np.ndarray:
        count = len(payloads)
        a = np.fromiter((p["a"] for p in payloads), dtype=np.int64, count=count)
        b = np.fromiter((p["b"] for p in payloads), dtype=np.int64, count=count)
        y = np.fromiter((p["y"] for p in payloads), dtype=np.int64, count=count)
        return support_counts(a, b, y, mechanism.d, mechanism.prime, mechanism.g,
                              self.BLOCK_CELLS)


class BLHEstimator(LocalHashingEstimator):
    name: ClassVar[str] = "blh"


U32 = np.uint32
LANE_REPORTS = 8 * 255  # a uint64 sum of 255 words of 8 booleans cannot carry out of a byte
# Residues for 2,040 / 4,080 / 8,160 reports at a time: 1.6 / 2.0 / 1.6 M reports/s a core at
# d = 1,024 (measured).
BLOCK_REPORTS = 2 * LANE_REPORTS
PARALLEL_REPORTS = 16_384  # below this, threads cost more than they save


def support_counts(a: np.ndarray, b: np.ndarray, y: np.ndarray, d: int, prime: int, g: int,
                   block_cells: int = 1 << 18, workers: int | None = None,
                   block_reports: int = BLOCK_REPORTS) -> np.ndarray:
    """Σ_u 1[((a_u·v + b_u) mod P) mod g = y_u] for every v < d, as int64.

    Reports are taken ``block_reports`` at a time, about ``block_cells`` report × category
    cells per numpy call (cache-sized), never a Python loop over reports or categories.
    numpy releases the GIL, so large batches are split across threads, one per core by
    default (``workers``). Any P < 2³¹ works, prime or not; a y outside [0, g) never matches.
    """
    if not (0 < prime < 1 << 31 and 0 < g < 1 << 31):
        raise ValueError("support_counts needs 0 < prime < 2**31 and 0 < g < 2**31")
    y = np.asarray(y, dtype=np.int64)
    keep = (y >= 0) & (y < g)
    a = np.asarray(a, dtype=np.int64)[keep] % prime
    b = np.asarray(b, dtype=np.int64)[keep] % prime
    y = y[keep]
    if d == 0 or len(y) == 0:
        return np.zeros(d, dtype=np.int64)
    spans = _spans(len(y), block_reports)
    if workers is None:
        workers = (os.cpu_count() or 1) if len(y) >= PARALLEL_REPORTS else 1
    workers = max(1, min(workers, len(spans)))

    def run(share: list[tuple[int, int]]) -> np.ndarray:
        counts = np.zeros(d, dtype=np.int64)
        counters: dict[int, _BlockCounter] = {}  # by block size: all but the last two share
        for lo, hi in share:
            if hi - lo not in counters:
                counters[hi - lo] = _BlockCounter(hi - lo, d, prime, g, block_cells)
            counts += counters[hi - lo].count(a[lo:hi], b[lo:hi], y[lo:hi])
        return counts

    shares = [spans[k::workers] for k in range(workers)]
    if workers == 1:
        return run(shares[0])
    with ThreadPoolExecutor(workers) as pool:
        total: np.ndarray = np.sum(list(pool.map(run, shares)), axis=0)
    return total


def _spans(n: int, size: int) -> list[tuple[int, int]]:
    """[lo, hi) blocks of at most ``size`` reports, each a whole number of lanes or less than
    one lane, so that its matches can be summed in byte lanes."""
    size = size - size % LANE_REPORTS if size >= LANE_REPORTS else max(1, size)
    full, rest = n - n % size, n % size
    cuts = [*range(0, full, size), full, full + rest - rest % LANE_REPORTS, n]
    return [(lo, hi) for lo, hi in itertools.pairwise(cuts) if hi > lo]


class _BlockCounter:
    """Counts blocks of ``reports`` reports in buffers allocated once per thread and block
    size: allocating their 3 MB afresh took a block of 4,080 from 2.0 ms to 2.7 ms (page
    faults, measured)."""

    def __init__(self, reports: int, d: int, prime: int, g: int, block_cells: int) -> None:
        self.d, self.prime, self.g = d, prime, g
        self.width = width = reports + (-reports) % 8  # whole uint64 words of booleans
        self.rows = rows = math.isqrt(d - 1) + 1  # β rows r < w; ω rows j < chunks ≤ w
        self.chunks = chunks = -(-d // rows)  # d ≤ w·chunks < d + w
        # The narrowest type that holds every key, and g (the padding's target, never a key).
        lane = np.uint8 if g < 1 << 8 else np.uint16 if g < 1 << 16 else U32
        self.residues = np.empty((rows, 2 * width), dtype=U32)  # β | ω
        self.scratch = np.empty((rows, 2 * width), dtype=U32)
        self.beta_g = np.empty((rows, width), dtype=lane)
        self.target = np.empty((chunks, 1, width), dtype=lane)
        self.differ = np.empty((chunks, 1, width), dtype=lane)
        self.threshold = np.empty((chunks, 1, width), dtype=U32)
        self.group = max(1, min(chunks, block_cells // (rows * width)))  # ω rows per call
        self.flag = np.empty((self.group, rows, width), dtype=bool)
        self.key = self.flag.view(lane) if lane is np.uint8 else \
            np.empty(self.flag.shape, dtype=lane)
        self.lanes = np.empty((chunks, rows, max(1, width // 8 // 255)), dtype=np.uint64)

    def count(self, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The support counts of one block (the method is in the module docstring)."""
        d, prime, g, width, rows, chunks = (self.d, self.prime, self.g, self.width,
                                            self.rows, self.chunks)
        real = len(y)
        step, start = np.zeros((2, 2 * width), dtype=U32)  # [a | a·w mod P], [b | 0]
        step[:real], start[:real] = a, b
        step[width:width + real] = a * rows % prime
        _residues(step, start, prime, self.residues, self.scratch)
        beta, omega = self.residues[:, :width], self.residues[:chunks, width:]
        low, high = self.scratch[:chunks, :width], self.scratch[:chunks, width:]
        _mod(beta, g, self.beta_g, self.scratch[:, :width])
        _mod(omega, g, low, high)
        np.subtract(y.astype(U32) + U32(g), low[:, :real], out=low[:, :real])
        _mod(low, g, low, high)  # (y − ω_j) mod g: the key when the sum does not wrap
        np.copyto(self.target[:, 0], low, casting="unsafe")
        np.add(low, U32(g - (-prime % g)), out=low)
        _mod(low, g, low, high)  # (y − ω_j − δ) mod g: the key when it wraps
        np.bitwise_xor(self.target[:, 0], low, out=self.differ[:, 0], casting="unsafe")
        self.target[:, 0, real:], self.differ[:, 0, real:] = g, 0  # padding: never a key
        np.subtract(U32(prime), omega, out=self.threshold[:, 0])  # wrap ⟺ β_r ≥ P − ω_j

        words = min(width // 8, 255)
        for j in range(0, chunks, self.group):
            m = min(self.group, chunks - j)
            key, flag = self.key[:m], self.flag[:m]
            np.greater_equal(beta, self.threshold[j:j + m], out=flag)
            np.multiply(flag.view(np.uint8), self.differ[j:j + m], out=key)
            np.bitwise_xor(key, self.target[j:j + m], out=key)  # the key that matches
            np.equal(key, self.beta_g, out=flag)
            matches = flag.view(np.uint64).reshape(m, rows, -1, words)
            np.add.reduce(matches, axis=3, out=self.lanes[j:j + m])
        byte_sums = self.lanes.reshape(chunks * rows, -1)[:d].view(np.uint8)
        counts: np.ndarray = byte_sums.sum(axis=1, dtype=np.int64)
        return counts


def _residues(step: np.ndarray, start: np.ndarray, prime: int, out: np.ndarray,
              spare: np.ndarray) -> None:
    """out[v] = (start + v·step) mod P for every row v (uint32, start and step < P < 2³¹), by
    doubling: row v + k is row v plus k·step mod P, less P when that reaches P. The sums stay
    below 2³², and no cell multiplies or divides. ``step`` is consumed."""
    p = U32(prime)
    out[0] = start
    k = 1
    while k < len(out):
        m = min(k, len(out) - k)
        new = out[k:k + m]
        np.add(out[:m], step, out=new)
        # x − P wraps around above x when x < P: the minimum is x mod P.
        np.minimum(new, np.subtract(new, p, out=spare[:m]), out=new)
        step += step
        np.minimum(step, step - p, out=step)
        k *= 2


def _mod(x: np.ndarray, g: int, out: np.ndarray, tmp: np.ndarray) -> None:
    """out = x mod g for uint32 x, through the uint32 ``tmp``: floor division by a scalar is
    fast in numpy (libdivide), % ten times slower."""
    if g & (g - 1) == 0:
        np.bitwise_and(x, U32(g - 1), out=out, casting="unsafe")
    else:
        np.floor_divide(x, U32(g), out=tmp)
        tmp *= U32(g)
        np.subtract(x, tmp, out=out, casting="unsafe")
