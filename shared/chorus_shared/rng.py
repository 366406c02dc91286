"""Randomness for the randomizers: the OS CSPRNG unless a caller injects another source.

A predictable generator would let anyone who can guess the coins undo the perturbation
(google/rappor ``doc/randomness.md``), so ``rng=None`` always means :class:`secrets.SystemRandom`.
A seeded :class:`random.Random` is for tests and simulation only.
"""

from __future__ import annotations

import random
import secrets
from typing import Protocol

__all__ = ["RandomSource", "bernoulli", "is_secure", "resolve_rng", "uniforms"]


class RandomSource(Protocol):
    """The part of :class:`random.Random` the randomizers use."""

    def random(self) -> float: ...

    def randrange(self, start: int, stop: int | None = ..., step: int = ...) -> int: ...

    def getrandbits(self, k: int, /) -> int: ...


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


def is_secure(rng: RandomSource) -> bool:
    """Whether ``rng`` draws from the operating system (not a seeded Mersenne Twister)."""
    return isinstance(rng, random.SystemRandom)
