"""Hash functions both sides must compute bit for bit identically.

Strings are hashed as their UTF-8 bytes, exactly as given (no normalisation, no case folding).
Bloom bit ``i`` of ``value`` in cohort ``c`` is ``murmur3_x86_32(utf8(value), seed) mod k`` with
``seed = c * MAX_HASHES + i``: a distinct, public seed per (cohort, hash) pair, so each cohort
has its own independent set of h hash functions (RAPPOR's cohorts, Erlingsson et al. 2014).
"""

from __future__ import annotations

import mmh3

__all__ = ["MAX_COHORTS", "MAX_HASHES", "bloom_bits", "bloom_mask"]

MAX_HASHES = 64
MAX_COHORTS = 1 << 20  # so that every seed fits in 32 bits


def bloom_bits(value: str, cohort: int, num_bits: int, num_hashes: int) -> tuple[int, ...]:
    """The h Bloom-filter positions of ``value`` in ``cohort`` (they may collide)."""
    data = value.encode("utf-8")
    base = cohort * MAX_HASHES
    return tuple(
        mmh3.hash(data, base + i, signed=False) % num_bits for i in range(num_hashes)
    )


def bloom_mask(value: str, cohort: int, num_bits: int, num_hashes: int) -> int:
    """The Bloom filter as an integer: bit i (1 << i) is Bloom bit i."""
    mask = 0
    for bit in bloom_bits(value, cohort, num_bits, num_hashes):
        mask |= 1 << bit
    return mask
