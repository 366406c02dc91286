"""CMS and HCMS intervals cover the true share over the draw of the hash functions.

For a campaign's fixed hashes the estimate's mean is f_v plus the collision bias
b_v = m/(m − 1)·Σ_{x≠v} f_x·(π_x(v) − 1/m), which does not shrink with n. Over random hashes
b_v has mean 0 and variance Σ_{x≠v} f_x²/(k(m − 1)), which the standard error adds, with
F₂ = Σ_x f_x² estimated from the sketch's rows (docs/mechanisms/strings.md, "Hash collisions in
the standard error").

The draws (helpers/sketchsim.py) place the values afresh in every repetition, through the
campaign's real hashes, and decode with the real estimator. The populations here (a geometric
head over a flat tail, with an absent candidate) are not the Zipf populations the method was
measured on.
"""

from __future__ import annotations

import functools

import mmh3
import numpy as np
import pytest

from chorus_collector.results.estimates import Z95
from helpers.sketchsim import CANDIDATES, GEOMETRIC, draws, murmur3_32, shares_draws
from helpers.support import z_threshold

ALPHA = 1e-4


def assert_covers_the_true_share(name: str, epsilon: float, k: int, m: int, n: int,
                                 reps: int, skewed: bool = True) -> None:
    """Pooled over candidates and repetitions, the coverage of f_v is 0.95 within the binomial
    band (conservative: the mean of a repetition's indicators has variance at most
    0.95·0.05), and each candidate's within its own band; the fixed-hash intervals fall short.

    And the misses fall on both sides: each side's pooled miss rate is within 1.5× of its
    2.5% (the gamma approximation of the collisions is not exact; measured 1.5–3.9%), up to
    the binomial band. The symmetric interval f̂ ± z·SE, with the same SE and the same
    coverage, fails that: the collisions' right skew put 3.5–6% of its misses above and
    0.1–0.9% below (the negative control, where ``skewed``: the collisions' share of the
    error is large enough to skew it)."""
    truth = np.append(GEOMETRIC[:CANDIDATES], 0.0)
    got = draws(name, epsilon, k, m, n, GEOMETRIC, reps, seed=34)
    covered = (got.low <= truth) & (truth <= got.high)
    pooled, each = covered.mean(), covered.mean(axis=0)
    tolerance = z_threshold(ALPHA) * np.sqrt(0.95 * 0.05 / reps)
    assert abs(pooled - 0.95) < tolerance, (pooled, np.round(each, 3))
    assert np.all(np.abs(each - 0.95) < z_threshold(ALPHA, len(truth)) *
                  np.sqrt(0.95 * 0.05 / reps)), np.round(each, 3)
    before = (np.abs(got.frequency - truth) <= Z95 * got.fixed_std_error).mean()
    assert before < 0.95 - tolerance, f"the fixed-hash intervals already cover: {before:.3f}"

    def balanced(above: np.ndarray, below: np.ndarray) -> bool:
        band = z_threshold(ALPHA, 2) * np.sqrt(0.025 * 0.975 / above.size)
        return all(0.025 / 1.5 - band < side.mean() < 0.025 * 1.5 + band
                   for side in (above, below))

    assert balanced(truth < got.low, truth > got.high), \
        ((truth < got.low).mean(), (truth > got.high).mean())
    symmetric = (truth < got.frequency - Z95 * got.std_error,
                 truth > got.frequency + Z95 * got.std_error)
    if skewed:
        assert not balanced(*symmetric), "the symmetric interval already balances its misses"


@pytest.mark.parametrize(("name", "epsilon", "n", "skewed"), [("cms", 2.0, 100_000, True),
                                                              ("hcms", 4.0, 10_000, False)])
def test_small_sketch_intervals_cover_the_true_share(name: str, epsilon: float, n: int,
                                                     skewed: bool) -> None:
    """k = 8, m = 16: collisions dominate (the fixed-hash intervals cover well under half).
    HCMS's sampling noise at n = 10⁴ still leaves the error's skew small enough that even the
    symmetric interval's misses fall on both sides."""
    assert_covers_the_true_share(name, epsilon, 8, 16, n, reps=1500, skewed=skewed)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_default_sketch_intervals_cover_the_true_share_at_a_million(name: str) -> None:
    """k = 32, m = 1024 (the defaults) at n = 10⁶, where the collision term is about as large
    as the fixed-hash variance."""
    assert_covers_the_true_share(name, 2.0 if name == "cms" else 4.0, 32, 1024, 10**6,
                                 reps=1500)


@functools.cache
def _shares(name: str) -> tuple[np.ndarray, np.ndarray]:
    """F̂₂ and F̂₃ from the same 800 draws (ε = 1, k = 16, m = 64, n = 20,000), shared by the
    two tests below: each checks its own statistic's mean, so one simulation serves both
    (helpers/sketchsim.py, ``shares_draws``: the estimator's own steps, checked against
    ``finalize``; the intervals are the tests above)."""
    return shares_draws(name, 1.0, 16, 64, 20_000, GEOMETRIC, 800, seed=7)


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_the_sum_of_squared_shares_is_unbiased_over_hashes(name: str) -> None:
    """E[F̂₂] = Σ_x f_x² over hash placements and users, within z·s/√R."""
    squares = _shares(name)[0]
    target = float(np.sum(GEOMETRIC**2))
    z = (squares.mean() - target) / (squares.std(ddof=1) / np.sqrt(len(squares)))
    assert abs(z) < z_threshold(ALPHA), (squares.mean(), target, z)
    assert np.all(squares > 0), "clipped at 0: the mean would be biased"


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_the_sum_of_cubed_shares_is_unbiased_over_hashes(name: str) -> None:
    """E[F̂₃] = Σ_x f_x³ (the collisions' skew) over hash placements and users, within z·s/√R,
    at ε = 1 and 1,250 reports a row, where the noise's own terms in Σ_i y_i³ (about
    3·c²/N_j for CMS) are larger than F₃ itself."""
    cubes = _shares(name)[1]
    target = float(np.sum(GEOMETRIC**3))
    z = (cubes.mean() - target) / (cubes.std(ddof=1) / np.sqrt(len(cubes)))
    assert abs(z) < z_threshold(ALPHA), (cubes.mean(), target, z)
    assert np.all((cubes > 0) & (cubes < 1)), "clipped: the mean would be biased"


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_the_collision_term_vanishes_where_collisions_are_negligible(name: str) -> None:
    """A flat population over 20,000 values (F₂ = 5·10⁻⁵) at the default sketch: the added
    term is then only F̂₂'s noise, whose standard deviation relative to the fixed-hash variance
    is about √(2/(mk)) at any n (Σ_i y_i² over m cells of noise variance σ², averaged over k
    rows), so the standard error grows by under 2·√(2/(mk)) = 1.6% (4 standard deviations).
    The same sketch over the geometric population at n = 10⁶ widens it by more than a fifth,
    so the comparison can see the term."""
    k, m = 32, 1024
    flat = np.full(20_000, 1 / 20_000)
    got = draws(name, 2.0, k, m, 100_000, flat, 5, seed=1)
    ratio = got.std_error / got.fixed_std_error
    assert np.all(ratio - 1 < 2 * np.sqrt(2 / (m * k))), np.round(ratio, 5)
    got = draws(name, 2.0, k, m, 10**6, GEOMETRIC, 3, seed=1)
    assert np.all(got.std_error / got.fixed_std_error > 1.2), \
        np.round(got.std_error / got.fixed_std_error, 3)


def test_the_vectorised_hash_is_murmur3_bit_for_bit() -> None:
    """The draws' placements (helpers/sketchsim.py) come from a numpy murmur3_x86_32: it must
    equal ``mmh3.hash(..., signed=False)`` at every length (each tail of 0–3 bytes), on
    arbitrary and non-ASCII bytes, and at seeds up to 2³² − 1."""
    rng = np.random.default_rng(3)
    data = [bytes(rng.integers(0, 256, size=size).tolist()) for size in range(25)
            for _ in range(8)] + ["näive-☃".encode(), b""]
    seeds = np.array([0, 1, 64, 64 * 31, 2**31, 2**32 - 1])
    expected = [[mmh3.hash(d, int(s), signed=False) for s in seeds] for d in data]
    assert murmur3_32(data, seeds).tolist() == expected
