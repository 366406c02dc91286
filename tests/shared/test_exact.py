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
