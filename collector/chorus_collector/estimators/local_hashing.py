"""Local hashing (OLH, BLH): the support count of v is the number of reports whose hash of v
equals their reported value, computed in cache-sized blocks on every core (MECHANISMS.md §4).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.pure import PureEstimator
from chorus_shared.mechanisms.local_hashing import LocalHashing


class LocalHashingEstimator(PureEstimator[LocalHashing]):
    """OLH / BLH support counts, C_v = #{u : H_u(v) = y_u}, vectorized at ingest.

    The B × d matrix ((a·v + b) mod P) mod g is built for blocks of reports sized to stay
    in cache (about 2¹⁸ cells) and spread over the cores by threads, never with a Python
    loop over reports × categories.
    """

    name: ClassVar[str] = "olh"
    mechanism_type: ClassVar[MechanismTypes] = LocalHashing
    BLOCK_CELLS: ClassVar[int] = 1 << 18  # 256 reports × 1024 categories: stays in cache

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
