"""The public hash functions of the discovery mechanisms (PEM, TreeHist), bit for bit.

A discovery report hashes a *prefix* of the value's bit string into one of ``bins`` buckets
with the hash function of a public ``cohort``. The function has to be computed identically by
the pure-Python client and by the numpy collector (which evaluates it for thousands of
candidate prefixes × hundreds of cohorts per step), so it is built from 64-bit integer
arithmetic only: SplitMix64's finaliser (Steele, Lea, Flood 2014) chained over the prefix's
64-bit words, then Lemire's multiply-shift range reduction.

* A value is its UTF-8 bytes padded with zero bytes to the campaign's ``max_bytes``: a bit
  string of m = 8·max_bytes bits. Its s-bit prefix keeps the first s bits and zeroes the rest,
  and is read as big-endian 64-bit words (the last one zero-filled).
* Over a declared alphabet of |A| characters, a value is instead its characters' codes (the
  place in the alphabet plus one; 0 pads) in w = ⌈log₂(|A| + 1)⌉ bits each, padded with zero
  codes to max_bytes ÷ (the alphabet's shortest UTF-8 character) characters.
* ``seed(salt, group, s)`` starts the chain, so each group and prefix length has its own family.
* ``bucket = ((mix(chain ⊕ φ(cohort)) >> 32) · bins) >> 32``.

The buckets are not exactly uniform (Lemire's reduction is off by at most bins/2³²), which costs
nothing in privacy: a report's ε comes from k-RR over the buckets, whatever the hash does.
"""

from __future__ import annotations

__all__ = ["MASK", "bucket", "mix64", "prefix_words", "seed", "symbols_value", "value_bits"]

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
COHORT_STEP = 0xD1B54A32D192ED03
GROUP_STEP = 0xAEF17502108EF2D9


def mix64(z: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def value_bits(data: bytes, max_bytes: int) -> int:
    """The value's bit string as an integer of 8·max_bytes bits (zero-padded bytes)."""
    return int.from_bytes(data.ljust(max_bytes, b"\0"), "big")


def symbols_value(codes: list[int], width: int, count: int) -> int:
    """A value over an alphabet as an integer of width·count bits: each character's code
    (1…|A|, its place in the alphabet plus one) in ``width`` bits, then zero codes."""
    bits = 0
    for code in [*codes, *[0] * (count - len(codes))]:
        bits = (bits << width) | code
    return bits


def prefix_words(bits: int, s: int, m: int) -> tuple[int, ...]:
    """The s-bit prefix of an m-bit string, left-aligned, as big-endian 64-bit words."""
    width = 64 * ((m + 63) // 64)
    aligned = (bits >> (m - s)) << (width - s) if s else 0
    return tuple((aligned >> (width - 64 * (i + 1))) & MASK for i in range(width // 64))


def seed(salt: int, group: int, s: int) -> int:
    return mix64((salt * GOLDEN + (group + 1) * GROUP_STEP + s) & MASK)


def chain(start: int, words: tuple[int, ...]) -> int:
    z = start
    for word in words:
        z = mix64(z ^ word)
    return z


def bucket(chained: int, cohort: int, bins: int) -> int:
    z = mix64(chained ^ (((cohort + 1) * COHORT_STEP) & MASK))
    return ((z >> 32) * bins) >> 32
