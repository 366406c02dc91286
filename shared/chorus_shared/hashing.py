"""Hash functions both sides must compute bit for bit identically.

Strings are hashed as their UTF-8 bytes, exactly as given (no normalisation, no case folding).
Bloom bit ``i`` of ``value`` in cohort ``c`` is ``murmur3_x86_32(utf8(value), seed) mod k`` with
``seed = c * MAX_HASHES + i``: a distinct, public seed per (cohort, hash) pair, so each cohort
has its own independent set of h hash functions (RAPPOR's cohorts, Erlingsson et al. 2014).
"""

from __future__ import annotations

import hashlib
import struct

import mmh3

__all__ = ["GOOGLE_MAX_BITS", "GOOGLE_MAX_HASHES", "MAX_COHORTS", "MAX_HASHES", "bloom_bits",
           "bloom_mask", "google_bloom_bits"]

GOOGLE_MAX_BITS = 256  # one MD5 digest byte per hash
GOOGLE_MAX_HASHES = 16  # the digest has 16 bytes

MAX_HASHES = 64
MAX_COHORTS = 1 << 20  # so that every seed fits in 32 bits


def bloom_bits(value: str, cohort: int, num_bits: int, num_hashes: int) -> tuple[int, ...]:
    """The h Bloom-filter positions of ``value`` in ``cohort`` (they may collide)."""
    data = value.encode("utf-8")
    base = cohort * MAX_HASHES
    return tuple(
        mmh3.hash(data, base + i, signed=False) % num_bits for i in range(num_hashes)
    )


def google_bloom_bits(value: str, cohort: int, num_bits: int,
                      num_hashes: int) -> tuple[int, ...]:
    """google/rappor's Bloom bits, for reports from its clients (compatibility mode).

    MD5 over the cohort as 4 big-endian bytes followed by the value's UTF-8 bytes; digest
    byte i modulo k is hash i (``client/python/rappor.py``, ``get_bloom_bits``).
    """
    digest = hashlib.md5(struct.pack(">L", cohort) + value.encode("utf-8")).digest()
    return tuple(digest[i] % num_bits for i in range(num_hashes))


def bloom_mask(value: str, cohort: int, num_bits: int, num_hashes: int,
               scheme: str = "mmh3") -> int:
    """The Bloom filter as an integer: bit i (1 << i) is Bloom bit i."""
    hasher = google_bloom_bits if scheme == "google-md5" else bloom_bits
    mask = 0
    for bit in hasher(value, cohort, num_bits, num_hashes):
        mask |= 1 << bit
    return mask
