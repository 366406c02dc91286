"""Randomness for the randomizers: the OS CSPRNG unless a caller injects another source.

A predictable generator would let anyone who can guess the coins undo the perturbation
(google/rappor ``doc/randomness.md``), so ``rng=None`` always means :class:`secrets.SystemRandom`.
A seeded :class:`random.Random` is for tests and simulation only.
"""

from __future__ import annotations

import random
import secrets
from typing import Protocol

__all__ = ["RandomSource", "bernoulli", "resolve_rng"]


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


def is_secure(rng: RandomSource) -> bool:
    """Whether ``rng`` draws from the operating system (not a seeded Mersenne Twister)."""
    return isinstance(rng, random.SystemRandom)
