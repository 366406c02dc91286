"""The exact samplers (Canonne, Kamath, Steinke 2020) draw exactly the stated laws.

They must use integer draws only (no float, whose porous low bits are Mironov's attack), and
each law is checked by a seeded binomial z-test or Pearson χ² at α = 1e-6.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction

import pytest

from chorus_shared.exact import bernoulli_exp, discrete_laplace, geometric_exp
from helpers.support import chi2_band, z_threshold


class IntegerOnly(random.Random):
    """A seeded source that fails the test if a float is ever drawn."""

    def random(self) -> float:
        raise AssertionError("an exact sampler drew a float")

    def getrandbits(self, k: int, /) -> int:  # defined here too, or randrange uses random()
        return super().getrandbits(k)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(3, 10), Fraction(1), Fraction(17, 7)])
def test_bernoulli_exp_has_probability_e_to_minus_gamma(gamma: Fraction) -> None:
    rng = IntegerOnly(1)
    draws = 40_000
    ones = sum(bernoulli_exp(rng, gamma) for _ in range(draws))
    p = math.exp(-gamma)
    if p == 1:
        assert ones == draws
        return
    z = (ones - draws * p) / math.sqrt(draws * p * (1 - p))
    assert abs(z) < z_threshold(1e-6, 1)


def _chi2_ok(observed: Counter[int], pmf: dict[int, float], draws: int) -> None:
    cells = [(observed.get(k, 0), p * draws) for k, p in pmf.items() if p * draws >= 5]
    rest_expected = draws - sum(e for _, e in cells)
    rest_observed = draws - sum(o for o, _ in cells)
    if rest_expected > 0:
        cells.append((rest_observed, rest_expected))
    chi2 = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    assert chi2 / dof < chi2_band(dof, 1e-6)[1]


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(5, 2)])
def test_geometric_exp_is_geometric(x: Fraction) -> None:
    rng = IntegerOnly(2)
    draws = 30_000
    observed = Counter(geometric_exp(rng, x) for _ in range(draws))
    ratio = math.exp(-x)
    pmf = {g: (1 - ratio) * ratio**g for g in range(200)}
    _chi2_ok(observed, pmf, draws)


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(1024, 7)])
def test_discrete_laplace_has_the_stated_pmf(scale: Fraction) -> None:
    rng = IntegerOnly(3)
    draws = 30_000
    observed = Counter(discrete_laplace(rng, scale) for _ in range(draws))
    decay = math.exp(-1 / scale)
    bound = int(40 * scale) + 5
    pmf = {z: (1 - decay) / (1 + decay) * decay ** abs(z) for z in range(-bound, bound + 1)}
    _chi2_ok(observed, pmf, draws)
    assert sum(z for z in observed.elements()) / draws == pytest.approx(
        0, abs=6 * math.sqrt(2 * decay / (1 - decay) ** 2 / draws))


def test_invalid_parameters_are_refused() -> None:
    rng = random.Random(0)
    with pytest.raises(ValueError, match="gamma"):
        bernoulli_exp(rng, Fraction(-1))
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace(rng, Fraction(0))


def _reference_bernoulli_exp(rng: random.Random, gamma: Fraction) -> bool:
    """The samplers as Canonne, Kamath and Steinke write them, in Fractions (Algorithm 1)."""
    def unit(g: Fraction) -> bool:
        k = 1
        while rng.randrange((g / k).denominator) < (g / k).numerator:
            k += 1
        return k % 2 == 1

    whole = gamma.numerator // gamma.denominator
    return all(unit(Fraction(1)) for _ in range(whole)) and unit(gamma - whole)


def _reference_discrete_laplace(rng: random.Random, scale: Fraction) -> int:
    x = 1 / scale
    while True:
        negative = rng.randrange(2) == 1
        while True:
            u = rng.randrange(x.denominator)
            if _reference_bernoulli_exp(rng, Fraction(u, x.denominator)):
                break
        v = 0
        while _reference_bernoulli_exp(rng, Fraction(1)):
            v += 1
        magnitude = (u + x.denominator * v) // x.numerator
        if not (negative and magnitude == 0):
            return -magnitude if negative else magnitude


@pytest.mark.parametrize("scale", [Fraction(7, 3), Fraction(1, 1000), Fraction(12345, 7)])
def test_the_integer_samplers_make_the_draws_of_the_rational_algorithm(scale: Fraction) -> None:
    """Integers instead of Fraction objects, with every bound reduced as Fraction reduces it:
    the same randrange calls in the same order, so a seeded generator gives the same reports
    (the protocol's payload vectors are drawn so)."""
    ours, reference = random.Random(5), random.Random(5)
    assert [discrete_laplace(ours, scale) for _ in range(3_000)] == \
        [_reference_discrete_laplace(reference, scale) for _ in range(3_000)]
    assert [bernoulli_exp(ours, Fraction(17, 7)) for _ in range(500)] == \
        [_reference_bernoulli_exp(reference, Fraction(17, 7)) for _ in range(500)]
    assert ours.getstate() == reference.getstate()
