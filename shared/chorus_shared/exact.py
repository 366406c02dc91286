"""Exact samplers from uniform integers and rationals (Canonne, Kamath, Steinke, NeurIPS 2020).

The textbook Laplace sampler ``λ·ln(U)`` over doubles produces a porous set of outputs whose
low-order bits depend on the input (Mironov, CCS 2012): it is not ε-DP as implemented. These
samplers use only ``randrange`` and exact rational arithmetic, so the distribution drawn is
exactly the one the privacy proof is about (MECHANISMS.md §14.3, item 3).
"""

from __future__ import annotations

import math
from fractions import Fraction

from chorus_shared.rng import RandomSource

__all__ = ["bernoulli_exp", "bernoulli_rational", "discrete_laplace", "geometric_exp"]


def bernoulli_rational(rng: RandomSource, p: Fraction) -> bool:
    """True with probability exactly p ∈ [0, 1]."""
    return rng.randrange(p.denominator) < p.numerator


def _bernoulli_exp_unit(rng: RandomSource, numerator: int, denominator: int) -> bool:
    """True with probability exactly e^{−γ}, for γ = numerator/denominator ∈ [0, 1] in lowest
    terms.

    Draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first 0; the index K of that first 0
    is odd with probability Σ_k (−γ)^k/k! = e^{−γ}. Each A_k is ``bernoulli_rational`` of γ/k
    in lowest terms, reduced with integers rather than built as a Fraction (most of a Laplace
    report's cost): the same ``randrange`` calls, so the same draws.
    """
    k = 1
    while True:
        scaled = denominator * k
        common = math.gcd(numerator, scaled)
        if not rng.randrange(scaled // common) < numerator // common:
            return k % 2 == 1
        k += 1


def bernoulli_exp(rng: RandomSource, gamma: Fraction) -> bool:
    """True with probability exactly e^{−γ}, for rational γ ≥ 0."""
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    return _bernoulli_exp(rng, gamma.numerator, gamma.denominator)


def _bernoulli_exp(rng: RandomSource, numerator: int, denominator: int) -> bool:
    """``bernoulli_exp`` of numerator/denominator ≥ 0 in lowest terms: e^{−1} per whole unit,
    then the fractional part."""
    whole, part = divmod(numerator, denominator)
    for _ in range(whole):
        if not _bernoulli_exp_unit(rng, 1, 1):
            return False
    return _bernoulli_exp_unit(rng, part, denominator)


def geometric_exp(rng: RandomSource, x: Fraction) -> int:
    """G ≥ 0 with P(G = g) = (1 − e^{−x})·e^{−x·g}, for rational x > 0.

    With x = s/t: U uniform on [0, t) accepted with probability e^{−U/t} and V ~ Geometric(1 −
    e^{−1}) make U + t·V geometric with parameter 1 − e^{−1/t}; ⌊(U + t·V)/s⌋ is then
    geometric with parameter 1 − e^{−s/t}.
    """
    if x <= 0:
        raise ValueError(f"x must be > 0, got {x}")
    s, t = x.numerator, x.denominator
    while True:
        u = rng.randrange(t)
        common = math.gcd(u, t)  # U/t in lowest terms (0/1 when U = 0)
        if _bernoulli_exp_unit(rng, u // common, t // common):
            break
    v = 0
    while _bernoulli_exp(rng, 1, 1):
        v += 1
    return (u + t * v) // s


def discrete_laplace(rng: RandomSource, scale: Fraction) -> int:
    """Z with P(Z = z) = (e^{1/τ} − 1)/(e^{1/τ} + 1)·e^{−|z|/τ}, τ = ``scale`` > 0, exactly.

    A fair sign and a geometric magnitude, rejecting "−0" so that 0 is not counted twice.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rate = 1 / scale
    while True:
        negative = rng.randrange(2) == 1
        magnitude = geometric_exp(rng, rate)
        if negative and magnitude == 0:
            continue
        return -magnitude if negative else magnitude
