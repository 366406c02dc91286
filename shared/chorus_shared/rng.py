"""Randomness for the randomizers: the OS CSPRNG unless a caller injects another source.

A predictable generator would let anyone who can guess the coins undo the perturbation
(google/rappor ``doc/randomness.md``), so ``rng=None`` always means :class:`secrets.SystemRandom`.
A seeded :class:`random.Random` is for tests and simulation only.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import random
import secrets
from collections.abc import Sequence
from typing import Protocol

__all__ = ["RandomSource", "assignment_label", "bernoulli", "bernoulli_bits", "is_secure",
           "keyed_source", "resolve_rng", "uniforms"]


class RandomSource(Protocol):
    """The part of :class:`random.Random` the randomizers use."""

    def random(self) -> float: ...

    def randrange(self, start: int, stop: int | None = ..., step: int = ...) -> int: ...

    def getrandbits(self, k: int, /) -> int: ...

    def sample(self, population: Sequence[int], k: int) -> list[int]: ...


_SYSTEM_RANDOM = secrets.SystemRandom()


def resolve_rng(rng: RandomSource | None) -> RandomSource:
    """``None`` means the OS CSPRNG; anything else is used as given."""
    return _SYSTEM_RANDOM if rng is None else rng


def bernoulli(rng: RandomSource, probability: float) -> bool:
    """True with ``probability``: a 53-bit uniform compared with p (error below 2**-53)."""
    return rng.random() < probability


def uniforms(rng: RandomSource, count: int) -> list[float]:
    """``count`` independent uniforms on [0, 1), each with 53 random bits like ``random()``.

    One ``getrandbits`` call serves them all: with the OS CSPRNG that is one read of
    7·count bytes instead of ``count`` reads, which is most of a k-bit report's cost.
    """
    if count <= 0:
        return []
    raw = rng.getrandbits(56 * count).to_bytes(7 * count, "little")
    scale = 2.0**-53
    return [(int.from_bytes(raw[7 * i:7 * i + 7], "little") >> 3) * scale for i in range(count)]


_FIELD = 64  # bits per lane: a 63-bit uniform and a guard bit that catches the carry
_LOW_63 = (1 << 63) - 1
_NO_CARRY = bytes.maketrans(bytes(range(256)), b"1" * 128 + b"0" * 128)


@functools.lru_cache(maxsize=256)
def _lanes(count: int) -> int:
    """Σ_i 2^{64 i} for i < count: multiplying by it replicates a 64-bit value in every lane."""
    return ((1 << (_FIELD * count)) - 1) // ((1 << _FIELD) - 1)


def bernoulli_bits(rng: RandomSource, count: int, probability: float) -> int:
    """``count`` independent Bernoulli(p) bits as an integer (bit i = 1 << i), in a few
    big-integer operations instead of a Python loop over the bits.

    Every lane i holds a 63-bit uniform u_i; adding 2⁶³ − T to every lane at once (T = ⌊p·2⁶³⌋)
    carries into the lane's guard bit exactly when u_i ≥ T, so bit i is 1 with probability
    T/2⁶³, within 2⁻⁶³ of p (the float comparison u < p is within 2⁻⁵³). Lanes never overflow
    into each other: u_i + 2⁶³ − T < 2⁶⁴.
    """
    if count <= 0:
        return 0
    threshold = int(min(max(probability, 0.0), 1.0) * 2.0**63)  # exact: p·2⁶³ is a float
    if count == 1:  # one lane (boolean RAPPOR): no carry exactly when u < T; the same draw
        return int(rng.getrandbits(_FIELD) & _LOW_63 < threshold)
    lanes = _lanes(count)
    uniform = rng.getrandbits(_FIELD * count) & (_LOW_63 * lanes)
    summed = uniform + ((1 << 63) - threshold) * lanes
    guards = summed.to_bytes(8 * count, "little")[7::8]  # the byte holding each guard bit
    return int(guards.translate(_NO_CARRY)[::-1], 2)


def is_secure(rng: RandomSource) -> bool:
    """Whether ``rng`` draws from the operating system (not a seeded Mersenne Twister)."""
    return isinstance(rng, random.SystemRandom)


def keyed_source(key: bytes, label: str) -> random.Random:
    """A generator determined by (key, label): HMAC-SHA256 of the label seeds it.

    For *public* assignments that must stay put, such as the group a discovery campaign's
    reports go to in one privacy period: the same install (key), campaign and period (label)
    always get the same draw, across restarts, and the draw depends on nothing else: never on
    a value. Never for the randomizer's coins, which come from the OS CSPRNG.
    """
    if len(key) < 16:
        raise ValueError("a keyed source needs a key of at least 16 bytes")
    digest = hmac.new(key, b"chorus-assignment-v1\0" + label.encode("utf-8"),
                      hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))


def assignment_label(campaign: str, digest: str, period: str) -> str:
    """The label of a campaign's keyed assignment: its name, its config version (digest) and
    the privacy period. The version is in it so that every config a collector serves gets a
    draw of its own: were the draw shared, a collector serving another split of the groups
    (PEM's ``final_share``) at every start would intersect the groups one install fell in
    and single it out (docs/threat-model.md, rule 4)."""
    return f"{campaign}\0{digest}\0{period}"
