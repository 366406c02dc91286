"""The Haar-wavelet method (HaarHRR; Cormode, Kulkarni, Srivastava, PVLDB 2019), simulated to
decide whether it earns a place among Chorus's distribution mechanisms (issue 17 item 1).

MECHANISMS-2.md §1.3. D = 2^h leaves. For level l = 1 … h the blocks have size
s_l = 2^{h−l+1}; a user's value has one non-zero (unnormalised) Haar coefficient per level,
+1 if it lies in the left half of its block, −1 in the right. Each user draws one level
uniformly and reports sign·H[r, j] for a public random row r of the Sylvester Hadamard matrix
of order 2^{l−1} (j its block), flipped with probability 1/(e^ε + 1): ε-LDP (one bit, ratio
e^ε). The collector sums the bits per row, takes one Walsh–Hadamard transform per level and
divides by n_l(2p − 1): unbiased estimates a_{l,j} of the population's coefficients, from
which θ_i = 1/D + Σ_l ψ_{l,j(i)}(i)·a_{l,j(i)}/s_l. The leaves sum to exactly 1 and are
consistent by construction (no post-processing). Simulation only: nothing here runs on a
device, so it lives in benchmarks/ and not in the registry.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["haar_leaves"]


def _walsh_hadamard(values: np.ndarray) -> np.ndarray:
    out = values.astype(np.float64).copy()
    half = 1
    while half < len(out):
        view = out.reshape(-1, 2, half)
        top, bottom = view[:, 0, :].copy(), view[:, 1, :].copy()
        view[:, 0, :], view[:, 1, :] = top + bottom, top - bottom
        half *= 2
    return out


def _popcount_parity(values: np.ndarray) -> np.ndarray:
    parity = np.zeros(len(values), dtype=np.int64)
    remaining = values.copy()
    while remaining.any():
        parity ^= remaining & 1
        remaining >>= 1
    return parity


def haar_leaves(unit_values: np.ndarray, buckets: int, epsilon: float,
                rng: np.random.Generator) -> np.ndarray:
    """θ̂ (D,) from one simulated report per value (values on the unit scale [0, 1])."""
    height = round(math.log2(buckets))
    if 2**height != buckets:
        raise ValueError("the Haar method needs a power-of-two number of buckets")
    n = len(unit_values)
    leaves = np.minimum((unit_values * buckets).astype(np.int64), buckets - 1)
    levels = rng.integers(1, height + 1, size=n)
    keep = math.exp(epsilon) / (math.exp(epsilon) + 1)
    theta = np.full(buckets, 1.0 / buckets)
    for level in range(1, height + 1):
        mine = levels == level
        n_level = int(mine.sum())
        if n_level == 0:
            continue
        size = 2 ** (height - level + 1)  # s_l
        blocks = 2 ** (level - 1)
        leaf = leaves[mine]
        block = leaf // size
        sign = np.where(leaf % size < size // 2, 1, -1)
        row = rng.integers(0, blocks, size=n_level)
        truth = sign * (1 - 2 * _popcount_parity(row & block))  # sign · H[r, j]
        flipped = rng.random(n_level) >= keep
        bits = np.where(flipped, -truth, truth)
        per_row = np.bincount(row, weights=bits, minlength=blocks)
        coefficients = _walsh_hadamard(per_row) / (n_level * (2 * keep - 1))  # a_{l,j}
        psi = np.where(np.arange(buckets) % size < size // 2, 1.0, -1.0)
        theta += psi * coefficients[np.arange(buckets) // size] / size
    return theta
