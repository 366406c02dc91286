"""Exact variances of the decoders over open strings, checked against simulation.

The formulas are derived in docs/mechanisms/strings.md ("Exact variances"). Model (S): users
are an i.i.d. sample from π. Each simulation draws R independent copies of the collector's
statistic from its exact distribution, decodes every copy with the real estimator
(``finalize``, or for the sketches its own decoding steps, checked against ``finalize``), and
checks, for every candidate:

* the sample variance s² of the R estimates against the exact σ² at the truth, computed here
  independently of the estimator: (R − 1)s²/σ² ~ χ²_{R−1} (the estimates are sums over
  thousands of users, so their excess kurtosis is negligible), accepted in the band of
  probability 1 − α/d (Wilson–Hilferty);
* the mean against the truth: |z| below the two-sided normal quantile at α/d;
* the coverage of the reported 95% intervals (the standard error the estimator states, which
  evaluates the same formula at the estimate): within z·√(0.95·0.05/R) of 0.95, the binomial
  band at α/d.

α = 1e-6 and d the number of candidates, so a correct formula fails a run about once in a
million; a variance 12% off fails it (the band is about [0.88, 1.13] at R = 3,000).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.rappor import decoder_variances, design_matrix
from chorus_collector.estimators.sketch import CountMeanSketchEstimator
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.mechanisms import (
    CountMeanSketch,
    HadamardCountMeanSketch,
    OpenRR,
    Rappor,
)
from helpers.sketchsim import sketch_statistic
from helpers.statcheck import identifiable_candidates
from helpers.support import chi2_band, z_threshold

ALPHA = 1e-6
Z95 = NormalDist().inv_cdf(0.975)
REPS = 3000
Decodable = Rappor | OpenRR

PI8 = np.array([0.35, 0.2, 0.15, 0.1, 0.08, 0.06, 0.04, 0.02])
PI6 = np.array([0.3, 0.25, 0.15, 0.12, 0.1, 0.08])
PI5 = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
PI3 = np.array([0.6, 0.3, 0.1])


def _campaign(mechanism: str, epsilon: float | None, **params: object) -> Campaign:
    return campaign_from_spec({"name": "strings", "mechanism": mechanism, "epsilon": epsilon,
                               "domain": {"kind": "strings"}, "params": params})


def assert_exact(estimates: np.ndarray, low: np.ndarray, high: np.ndarray, truth: np.ndarray,
                 exact_var: np.ndarray) -> None:
    """Mean, variance and interval coverage of R × d estimates against the exact theory."""
    reps, d = estimates.shape
    ratio = estimates.var(axis=0, ddof=1) / exact_var
    z = (estimates.mean(axis=0) - truth) / np.sqrt(exact_var / reps)
    covered = ((low <= truth) & (truth <= high)).mean(axis=0)
    report = (f"simulated/exact variance {np.round(ratio, 3)}, bias z {np.round(z, 2)}, "
              f"coverage {np.round(covered, 4)}")
    lo, hi = chi2_band(reps - 1, ALPHA / d)
    assert np.all((ratio > lo) & (ratio < hi)), f"{report}; band [{lo:.3f}, {hi:.3f}]"
    assert np.max(np.abs(z)) < z_threshold(ALPHA, d), report
    tolerance = z_threshold(ALPHA, d) * np.sqrt(0.95 * 0.05 / reps)
    assert np.max(np.abs(covered - 0.95)) < tolerance, f"{report}; ±{tolerance:.4f}"


# RAPPOR, O-RAPPOR and O-RR: weighted least squares over the cohort × bit design ------------


def wls_operator(x: np.ndarray, sizes: np.ndarray, k: int) -> np.ndarray:
    """A = (XᵀWX)⁻¹XᵀW, the weighted least-squares fit with each cohort's size as weight."""
    weighted = x * np.repeat(sizes, k).astype(np.float64)[:, None]
    operator: np.ndarray = np.linalg.solve(x.T @ weighted, weighted.T)
    return operator


def bit_variances(mechanism: Decodable, x: np.ndarray, sizes: np.ndarray,
                  pi: np.ndarray) -> np.ndarray:
    """Var[Y] of every cohort bit (bin): λ(1 − λ)/((r1 − r0)²·N_j), λ = r0 + (r1 − r0)·X π."""
    gap = mechanism.r1 - mechanism.r0
    lam = mechanism.r0 + gap * (x @ pi)
    variance: np.ndarray = lam * (1 - lam) / (np.repeat(sizes, mechanism.k) * gap**2)
    return variance


def dense_covariance(mechanism: Decodable, x: np.ndarray, sizes: np.ndarray,
                     pi: np.ndarray) -> np.ndarray:
    """Cov[β̂] = A·Cov[Y]·Aᵀ given the cohort sizes, Cov[Y] written out in full.

    One report of cohort j has debiased bits Z = (R − r0)/(r1 − r0), with report rates
    λ = r0 + (r1 − r0)·X_j π. RAPPOR: given the Bloom filter B the bits are independent, so
    Cov[R] = diag(λ(1 − λ)) on the diagonal and (r1 − r0)²·Cov[B] off it, with
    Cov[B] = X_j (diag π − ππᵀ) X_jᵀ. O-RR: R is the one-hot vector of the reported bin,
    Cov[R] = diag λ − λλᵀ. Cov[Y_j] = Cov[Z]/N_j, and cohorts are independent.
    """
    k, gap = mechanism.k, mechanism.r1 - mechanism.r0
    operator = wls_operator(x, sizes, k)
    cov_y = np.zeros((len(x), len(x)))
    for j, size in enumerate(sizes):
        x_j = x[j * k:(j + 1) * k]
        lam = mechanism.r0 + gap * (x_j @ pi)
        if isinstance(mechanism, OpenRR):
            report = np.diag(lam) - np.outer(lam, lam)
        else:
            report = gap**2 * (x_j @ (np.diag(pi) - np.outer(pi, pi)) @ x_j.T)
            np.fill_diagonal(report, lam * (1 - lam))
        cov_y[j * k:(j + 1) * k, j * k:(j + 1) * k] = report / (gap**2 * size)
    covariance: np.ndarray = operator @ cov_y @ operator.T
    return covariance


def cohort_tables(mechanism: Decodable, x: np.ndarray, sizes: np.ndarray, pi: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """One draw of the m × (k + 1) statistic: each cohort's users hold candidates
    multinomially; given them, a RAPPOR bit count is Bin(#set, r1) + Bin(#unset, r0) (bits are
    independent given the Bloom filter), and O-RR's reports of the users in true bin t are
    multinomial over k-RR's row t."""
    m, k = len(sizes), mechanism.k
    holders = rng.multinomial(sizes, pi)  # cohort × candidate
    true_ones = np.einsum("jis,js->ji", x.reshape(m, k, -1), holders).astype(np.int64)
    if isinstance(mechanism, OpenRR):
        channel = np.full((k, k), mechanism.r0)
        np.fill_diagonal(channel, mechanism.r1)
        counts = rng.multinomial(true_ones, channel).sum(axis=1)
    else:
        counts = rng.binomial(true_ones, mechanism.r1) + \
            rng.binomial(sizes[:, None] - true_ones, mechanism.r0)
    return np.column_stack([sizes, counts]).ravel()


BLOOM_CASES = [
    pytest.param("rappor", 2.0, {"k": 32, "h": 2, "m": 16}, PI8, False, id="rappor-eps2"),
    # At ε = 7 the covariance of one user's Bloom bits is a large part of the variance.
    pytest.param("rappor", 7.0, {"k": 32, "h": 2, "m": 16}, PI8, True, id="rappor-eps7"),
    pytest.param("rappor", None, {"k": 16, "h": 2, "m": 8, "f": 0.5, "p": 0.5, "q": 0.75},
                 PI5, False, id="rappor-prr"),
    pytest.param("o_rappor", 1.0, {"k": 16, "m": 8}, PI6, False, id="o_rappor"),
    # Few bins at small ε: one report's bins are strongly anti-correlated (−λ_i λ_l).
    pytest.param("o_rr", 0.5, {"k": 4, "m": 8}, PI3, True, id="o_rr-eps0.5-k4"),
    pytest.param("o_rr", 4.0, {"k": 16, "m": 8}, PI6, False, id="o_rr-eps4-k16"),
]


def _bloom_setup(name: str, epsilon: float | None, params: dict[str, int],
                 pi: np.ndarray, n: int) -> tuple[Campaign, list[str], np.ndarray, np.ndarray]:
    campaign = _campaign(name, epsilon, **params)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor | OpenRR)
    candidates = identifiable_candidates(mechanism, len(pi), "site")
    sizes = np.full(mechanism.m, n // mechanism.m)  # fixed: the variance is given the sizes
    x = design_matrix(mechanism, list(range(mechanism.m)), candidates)
    return campaign, candidates, sizes, x


@pytest.mark.parametrize(("name", "epsilon", "params", "pi", "within"), BLOOM_CASES)
def test_the_decoders_own_variance_formula_is_the_dense_covariance(
        name: str, epsilon: float | None, params: dict[str, int], pi: np.ndarray,
        within: bool) -> None:
    """At the truth, ``decoder_variances`` (the O(M²) form the estimator evaluates at its
    estimate) equals the diagonal and the total of A·Cov[Y]·Aᵀ written out in full."""
    campaign, _, sizes, x = _bloom_setup(name, epsilon, params, pi, 4000)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor | OpenRR)
    categorical = (mechanism.r0, mechanism.r1 - mechanism.r0) \
        if isinstance(mechanism, OpenRR) else None
    variances, total = decoder_variances(wls_operator(x, sizes, mechanism.k), x, pi,
                                         bit_variances(mechanism, x, sizes, pi), sizes,
                                         mechanism.k, categorical)
    dense = dense_covariance(mechanism, x, sizes, pi)
    np.testing.assert_allclose(variances, np.diag(dense), rtol=1e-10)
    np.testing.assert_allclose(total, dense.sum(), rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "epsilon", "params", "pi", "within"), BLOOM_CASES)
def test_decoder_estimates_have_the_exact_variance_and_their_intervals_cover(
        name: str, epsilon: float | None, params: dict[str, int], pi: np.ndarray,
        within: bool) -> None:
    """``within``: the covariance within one report matters here, so the χ² band rejects
    the formula without it (each bit's variance alone, A·diag(Var Y)·Aᵀ)."""
    campaign, candidates, sizes, x = _bloom_setup(name, epsilon, params, pi, 4000)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor | OpenRR)
    exact = np.diag(dense_covariance(mechanism, x, sizes, pi))
    estimator, query = estimator_for(name), Query(candidates=tuple(candidates))
    rng = np.random.default_rng(34)
    rows = [estimator.finalize(campaign, int(sizes.sum()),
                               cohort_tables(mechanism, x, sizes, pi, rng), query).rows
            for _ in range(REPS)]
    estimates, low, high = (np.array([[getattr(r, field) for r in row] for row in rows])
                            for field in ("frequency", "frequency_ci_low", "frequency_ci_high"))
    assert_exact(estimates, low, high, pi, exact)
    if within:
        bits_alone = wls_operator(x, sizes, mechanism.k)**2 @ bit_variances(mechanism, x,
                                                                           sizes, pi)
        _, high_band = chi2_band(REPS - 1, ALPHA / len(pi))
        assert np.any(estimates.var(axis=0, ddof=1) / bits_alone > high_band)


# CMS and HCMS: Apple's sketch estimator ------------------------------------------------------

VALUES = [f"value-{i}" for i in range(40)]
ZIPF = 1 / np.arange(1, len(VALUES) + 1) ** 1.1
ZIPF /= ZIPF.sum()
CANDIDATES = 5  # the five most frequent values; the other 35 only collide with them

SKETCH_CASES = [
    pytest.param("cms", 2.0, 16, 64, id="cms-eps2"),
    pytest.param("cms", 0.8, 8, 16, id="cms-eps0.8"),
    pytest.param("hcms", 1.5, 16, 32, id="hcms-eps1.5"),
    pytest.param("hcms", 4.0, 8, 16, id="hcms-eps4"),
]


def report_variance(mechanism: CountMeanSketch, theta: np.ndarray) -> np.ndarray:
    """Var[Z] of one report's contribution Z, given E[Z] = θ (i.i.d. users, fixed hashes).

    CMS: Z = c·bit − (c − 1)/2, and given the value and the row, E[Z] is 1 on a collision and
    0 otherwise, with Var = c²/4·(1 − 1/c²); so Var[Z] = (c² − 1)/4 + θ(1 − θ). HCMS: Z = ±c,
    so Var[Z] = c² − θ².
    """
    c = mechanism.c
    if isinstance(mechanism, HadamardCountMeanSketch):
        result: np.ndarray = c**2 - theta**2
        return result
    result = (c**2 - 1) / 4 + theta * (1 - theta)
    return result


def sketch_table(mechanism: CountMeanSketch, positions: np.ndarray, pi: np.ndarray, n: int,
                 rng: np.random.Generator) -> np.ndarray:
    """One draw of the k × (m + 1) statistic for users drawn from π, with the hash positions
    ``positions[value, row]``. CMS: given how many users of each value drew each row, each
    cell's count is Bin(#hot, 1 − flip) + Bin(#cold, flip) (helpers/sketchsim.py). HCMS: user by
    user, not through the aggregate draw the coverage test uses."""
    k, m = mechanism.k, mechanism.m
    if isinstance(mechanism, HadamardCountMeanSketch):
        values, rows = rng.choice(len(pi), n, p=pi), rng.integers(k, size=n)
        hadamard_rows = rng.integers(m, size=n)
        both = np.arange(m)[:, None] & np.arange(m)[None, :]
        parity = np.zeros_like(both)
        for bit in range(m.bit_length()):
            parity ^= (both >> bit) & 1
        hadamard = 1 - 2 * parity  # H_m[l, i] = (−1)^popcount(l & i)
        truth = hadamard[hadamard_rows, positions[values, rows]]
        sign = np.where(rng.random(n) < mechanism.keep, truth, -truth)
        width = m + 1
        table = np.bincount(rows * width, minlength=k * width)
        table += np.rint(np.bincount(rows * width + 1 + hadamard_rows, weights=sign,
                                     minlength=k * width)).astype(np.int64)
        return table
    return sketch_statistic(mechanism, positions, pi, n, rng)


def decode_sketches(estimator: CountMeanSketchEstimator, mechanism: CountMeanSketch,
                    states: list[np.ndarray], positions: np.ndarray,
                    n: int) -> tuple[np.ndarray, np.ndarray]:
    """f̂ of the candidates at ``positions`` and F̂₂, per state, through the estimator's own
    steps (``cell_totals``, ``contributions``, ``sum_of_squares``) without the intervals that
    take most of ``finalize``'s time and that the fixed-hash test does not read; the test
    checks them against ``finalize`` on a hundred states and on a hundred where a clip
    acts."""
    m = mechanism.m
    estimates, squares = [], []
    for state in states:
        table = state.reshape(mechanism.k, m + 1).astype(np.float64)
        cells = estimator.cell_totals(mechanism, table)
        totals = estimator.contributions(mechanism, cells, positions)
        estimates.append(m / (m - 1) * (totals / n - 1 / m))
        squares.append(estimator.sum_of_squares(mechanism, cells, table[:, 0]))
    return np.array(estimates), np.array(squares)


def _sketch(name: str, epsilon: float, k: int, m: int) -> tuple[Campaign, CountMeanSketch]:
    campaign = _campaign(name, epsilon, k=k, m=m)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, CountMeanSketch)
    return campaign, mechanism


@pytest.mark.slow
@pytest.mark.parametrize(("name", "epsilon", "k", "m"), SKETCH_CASES)
def test_sketch_estimates_have_the_exact_fixed_hash_variance_and_their_intervals_cover(
        name: str, epsilon: float, k: int, m: int) -> None:
    """With the campaign's own hashes, θ_v = Σ_x f_x·π_x(v) (π_x(v): the share of rows where
    x lands on v's cell) sets both E[f̂_v] = m/(m − 1)·(θ_v − 1/m) and
    Var[f̂_v] = (m/(m − 1))²·Var[Z]/n; intervals from that variance at the estimate cover
    E[f̂_v]. The reported standard error adds the collision term (F̂₂ − f̂_v²)/(k(m − 1)), and
    for these fixed hashes E[F̂₂] = mean_j (m·G_j − 1)/(m − 1), G_j = Σ_i g_{j,i}² the squared
    cell shares of row j (test_sketch_coverage.py checks it over random hashes).

    The R statistics are decoded by the estimator's own steps (``decode_sketches``), and the
    answers ``finalize`` gives (f̂, its standard error, F̂₂) for a hundred of them and for a
    hundred where a clip acts: they must be the same numbers. (Every copy went through
    ``finalize`` before; its intervals, which this test does not read, were nine tenths of the
    time. The intervals' coverage is test_sketch_coverage.py's.)"""
    campaign, mechanism = _sketch(name, epsilon, k, m)
    positions = np.array([[mechanism.position(v, j) for j in range(k)] for v in VALUES])
    share = (positions[:, None, :] == positions[None, :CANDIDATES, :]).mean(axis=2)
    theta = ZIPF @ share
    assert np.any(share[CANDIDATES:] > 0), "no collision: the test would not see their terms"
    n, factor = 5000, m / (m - 1)
    expected = factor * (theta - 1 / m)
    exact = factor**2 * report_variance(mechanism, theta) / n
    estimator = estimator_for(name)
    assert isinstance(estimator, CountMeanSketchEstimator)
    query = Query(candidates=tuple(VALUES[:CANDIDATES]))
    rng = np.random.default_rng(34)
    states = [sketch_table(mechanism, positions, ZIPF, n, rng) for _ in range(REPS)]
    estimates, squares = decode_sketches(estimator, mechanism, states, positions[:CANDIDATES], n)
    at_estimate = np.clip(estimates / factor + 1 / m, 0.0, 1.0)
    fixed = factor * np.sqrt(report_variance(mechanism, at_estimate) / n)
    assert_exact(estimates, estimates - Z95 * fixed, estimates + Z95 * fixed, expected, exact)
    cells = np.array([np.bincount(positions[:, j], weights=ZIPF, minlength=m)
                      for j in range(k)])
    target = np.mean((m * (cells**2).sum(axis=1) - 1) / (m - 1))
    z = (squares.mean() - target) / (squares.std(ddof=1) / np.sqrt(REPS))
    # F̂₂ is clipped at 0, which a few runs at ε = 0.8 reach; that raises the mean negligibly.
    assert abs(z) < z_threshold(ALPHA, 1), (squares.mean(), target, np.mean(squares == 0))
    # The answers themselves, through ``finalize``: the first 100 repetitions, and the first
    # 100 where a clip acts (F̂₂ at 0 or 1, or the collision term's max(F̂₂ − f̂_v², 0)).
    own = np.clip(estimates, 0, 1)**2
    clipped = (squares <= 0) | (squares >= 1) | np.any(squares[:, None] < own, axis=1)
    checked = np.union1d(np.arange(100), np.flatnonzero(clipped)[:100])
    results = [estimator.finalize(campaign, n, states[i], query) for i in checked]
    answered, reported = (np.array([[getattr(r, field) for r in result.rows]
                                    for result in results])
                          for field in ("frequency", "frequency_std_error"))
    np.testing.assert_allclose(answered, estimates[checked], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose([result.extra["sum_of_squared_shares"] for result in results],
                               squares[checked], rtol=1e-12, atol=1e-15)
    added = np.maximum(squares[checked, None] - own[checked], 0) / (k * (m - 1))
    np.testing.assert_allclose(reported**2, fixed[checked]**2 + added, rtol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "epsilon", "k", "m"), SKETCH_CASES)
def test_over_random_hashes_sketch_estimates_are_unbiased_with_the_collision_variance(
        name: str, epsilon: float, k: int, m: int) -> None:
    """Hash positions drawn afresh, independent and uniform, for every repetition. Then
    θ_v = f_v + Σ_{x≠v} f_x·π_x(v) with kπ_x(v) ~ Bin(k, 1/m) independently, so
    E[θ] = f_v + (1 − f_v)/m, Var_h[θ] = V = Σ_{x≠v} f_x²·(m − 1)/(m²k), and
    Var[f̂_v] = (m/(m − 1))²·[(Var[Z] at E[θ] − V)/n + V]: the collision term
    (m/(m − 1))²·V = Σ_{x≠v} f_x²/(k(m − 1)) is not in the fixed-hash standard error."""
    _, mechanism = _sketch(name, epsilon, k, m)
    n, factor = 5000, m / (m - 1)
    f = ZIPF[:CANDIDATES]
    mean_theta = f + (1 - f) / m
    collision = (np.sum(ZIPF**2) - f**2) * (m - 1) / (m * m * k)
    exact = factor**2 * ((report_variance(mechanism, mean_theta) - collision) / n + collision)
    estimator = estimator_for(name)
    assert isinstance(estimator, CountMeanSketchEstimator)
    rng = np.random.default_rng(34)

    def draw() -> np.ndarray:
        positions = rng.integers(m, size=(len(VALUES), k))
        table = sketch_table(mechanism, positions, ZIPF, n, rng).reshape(k, m + 1)
        cells = estimator.cell_totals(mechanism, table.astype(np.float64))
        totals = estimator.contributions(mechanism, cells, positions[:CANDIDATES])
        result: np.ndarray = factor * (totals / n - 1 / m)
        return result

    estimates = np.array([draw() for _ in range(REPS)])
    reps, d = estimates.shape
    ratio = estimates.var(axis=0, ddof=1) / exact
    z = (estimates.mean(axis=0) - f) / np.sqrt(exact / reps)
    lo, hi = chi2_band(reps - 1, ALPHA / d)
    assert np.all((ratio > lo) & (ratio < hi)), f"simulated/exact {np.round(ratio, 3)}"
    assert np.max(np.abs(z)) < z_threshold(ALPHA, d), f"bias z {np.round(z, 2)}"
    # The collision term matters: without it the same band rejects the formula.
    without = factor**2 * report_variance(mechanism, mean_theta) / n
    assert np.any(estimates.var(axis=0, ddof=1) / without > hi)
