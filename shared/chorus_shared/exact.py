"""Exact samplers from uniform integers and rationals (Canonne, Kamath, Steinke, NeurIPS 2020).

The textbook Laplace sampler ``λ·ln(U)`` over doubles produces a porous set of outputs whose
low-order bits depend on the input (Mironov, CCS 2012): it is not ε-DP as implemented. These
samplers use only ``randrange`` and exact rational arithmetic, so the distribution drawn is
exactly the one the privacy proof is about (MECHANISMS.md §14.3, item 3).
"""

from __future__ import annotations

from fractions import Fraction

from chorus_shared.rng import RandomSource

__all__ = ["bernoulli_exp", "bernoulli_rational", "discrete_laplace", "geometric_exp"]


def bernoulli_rational(rng: RandomSource, p: Fraction) -> bool:
    """True with probability exactly p ∈ [0, 1]."""
    return rng.randrange(p.denominator) < p.numerator


def _bernoulli_exp_unit(rng: RandomSource, gamma: Fraction) -> bool:
    """True with probability exactly e^{−γ}, for γ ∈ [0, 1].

    Draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first 0; the index K of that first 0
    is odd with probability Σ_k (−γ)^k/k! = e^{−γ}.
    """
    k = 1
    while bernoulli_rational(rng, gamma / k):
        k += 1
    return k % 2 == 1


def bernoulli_exp(rng: RandomSource, gamma: Fraction) -> bool:
    """True with probability exactly e^{−γ}, for rational γ ≥ 0."""
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    whole = gamma.numerator // gamma.denominator
    for _ in range(whole):
        if not _bernoulli_exp_unit(rng, Fraction(1)):
            return False
    return _bernoulli_exp_unit(rng, gamma - whole)


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
        if bernoulli_exp(rng, Fraction(u, t)):
            break
    v = 0
    while bernoulli_exp(rng, Fraction(1)):
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
