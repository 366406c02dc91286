"""Unbiasedness and variance of every estimator, against exact theory (MECHANISMS.md §16.3–4).

Model (F), fixed population: the dataset is fixed and only the mechanism is re-randomized in
each of R repetitions (seeded). For each estimate v:

* z_v = (mean over R of the estimate − truth) / √(Var_F / R) must stay below the two-sided
  normal quantile for α = 1e-6, Bonferroni over the d estimates;
* the sample variance over R, divided by the exact Var_F, must lie in the χ²_{R−1} band for
  the same α (so a wrong variance formula, or a sampler with the wrong p, fails). At
  R = 1000 the band is about [0.80, 1.23]: k-RR's f-term (+40% at f = 0.5, d = 4, ε = ln 3)
  is well outside it.

The band depends on R only (it bounds a ratio to the exact variance), so the randomizer's
cost, n·R reports, is sized through n by the bias test's power: with s_v = √(Var_F,v / R) and
z* the Bonferroni threshold (5.0–5.5 here), a bias above (z* + 3.09)·s_v fails with probability
0.999 or more. A probability the estimator or the sampler gets wrong by δ shifts a share by
about δ/(p* − q*) against s_v ≈ √(q*(1 − q*)/(nR))/(p* − q*): at n = 500, R = 1000 every δ of
0.008 or more is caught that surely in every example campaign (0.006 at n = 1000, a wrong
formula for p* or q* being off by 0.02 or more). A report's excess kurtosis (about 18 at
q* = 0.04, the smallest here) adds under 0.04/R to the variance ratio's variance at n = 500,
against its 2/R: the band still holds the ratio at its α.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.common import fixed_population_variance
from chorus_collector.estimators.rappor import design_matrix
from chorus_shared import Campaign
from chorus_shared.hashing import bloom_mask
from chorus_shared.mechanisms import KRR, BasicRappor, BooleanRappor, Duchi, PureOracle, Rappor
from helpers.examples import example_campaigns
from helpers.statcheck import (
    assert_calibrated,
    assert_unbiased_with_exact_variance,
    frequency_values,
    identifiable_candidates,
    run_repetitions,
)

# Hundreds of repetitions of the real randomizer and estimator per case: a third of the run.
pytestmark = pytest.mark.slow

CAMPAIGNS = example_campaigns()


def _by_kind(*names: str) -> list[Campaign]:
    return [c for c in CAMPAIGNS if c.mechanism.name in names]


@pytest.mark.parametrize("campaign", _by_kind("krr", "rr", "basic_rappor", "sue", "oue", "ss",
                                               "hr", "olh", "blh", "shist"),
                         ids=lambda c: c.name)
def test_pure_categorical_mechanisms_are_unbiased_with_the_exact_variance(
        campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, KRR | BasicRappor | PureOracle)
    d, n = len(mechanism.domain.values), 500  # n: the module docstring's power argument
    weights = [1 / (v + 1) ** 1.1 for v in range(d)]
    counts = [int(n * w / sum(weights)) for w in weights]
    counts[0] += n - sum(counts)
    inputs = [v for v, c in enumerate(counts) for _ in range(c)]
    truth = np.array(counts) / n
    p, q = mechanism.support_probabilities()
    exact = np.array([fixed_population_variance(n, f, p, q) for f in truth]) / n**2
    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, 1000, Query(), frequency_values)
    assert_unbiased_with_exact_variance(estimates, truth, exact)
    if isinstance(mechanism, KRR):  # Σ f̂ = 1 exactly, since 1 − d·q = p − q (§2)
        assert np.allclose(estimates.sum(axis=1), 1.0, atol=1e-9)


@pytest.mark.parametrize("campaign", _by_kind("boolean_rappor"), ids=lambda c: c.name)
def test_boolean_rappor_is_unbiased_with_the_exact_variance(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, BooleanRappor)
    # n: the module docstring's power argument. s_v ≤ 0.0025, so a bias of 0.021 fails with
    # probability 0.999: an r0 off by 0.007 or more (0.0045 at n = 1500); the IRR's p, q taken
    # for r0, r1 (the PRR forgotten) moves the share by 0.05 and 0.12 where f > 0.
    n, holders = 600, 160
    inputs = [1] * holders + [0] * (n - holders)
    truth = np.array([1 - holders / n, holders / n])
    gap = mechanism.r1 - mechanism.r0
    spread = holders * mechanism.r1 * (1 - mechanism.r1) \
        + (n - holders) * mechanism.r0 * (1 - mechanism.r0)
    exact = np.full(2, spread / (n**2 * gap**2))
    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, 1000, Query(), frequency_values)
    assert_unbiased_with_exact_variance(estimates, truth, exact)


@pytest.mark.parametrize("campaign", _by_kind("duchi"), ids=lambda c: c.name)
def test_duchi_mean_is_unbiased_with_the_exact_variance(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Duchi)
    lo, hi = mechanism.domain.lo, mechanism.domain.hi
    n = 3000
    values = [lo + (hi - lo) * ((i * 0.618) % 1.0) ** 2 for i in range(n)]
    values[:50] = [hi + 10] * 50  # outside the range: clipped on the device
    inputs = [mechanism.encode(v) for v in values]
    clipped = [min(max(v, lo), hi) for v in values]
    truth = np.array([sum(clipped) / n])
    scale = (hi - lo) / 2
    exact = np.array([scale**2 * sum(mechanism.per_report_variance(t) for t in inputs) / n**2])

    def extract(result: Any) -> tuple[np.ndarray, np.ndarray]:
        return np.array([result.mean]), np.array([result.std_error])

    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, 600, Query(), extract)
    assert_unbiased_with_exact_variance(estimates, truth, exact)


@pytest.mark.parametrize("campaign", _by_kind("rappor"), ids=lambda c: c.name)
def test_rappor_decoding_is_unbiased_with_the_exact_variance(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    m = mechanism.m
    candidates = identifiable_candidates(mechanism, 3, "site")
    shares = [0.5, 0.3, 0.2]
    per_cohort = [int(60 * s) for s in shares]  # identical composition in every cohort
    inputs, assignments = [], []
    for cohort in range(m):
        for value, count in zip(candidates, per_cohort, strict=True):
            inputs += [value] * count
            assignments += [{"cohort": cohort}] * count
    n = len(inputs)
    truth = np.array(per_cohort) / sum(per_cohort)
    exact = _rappor_exact_variance(mechanism, candidates, per_cohort)
    estimates, _ = run_repetitions(campaign, inputs, assignments, 800,
                        Query(candidates=tuple(candidates)), frequency_values)
    assert n == 60 * m
    assert_unbiased_with_exact_variance(estimates, truth, exact)


def _rappor_exact_variance(mechanism: Rappor, candidates: list[str],
                           per_cohort: list[int]) -> np.ndarray:
    """Var_F of β̂ = A·Y with fixed cohorts: A diag(Var Y) Aᵀ, Var Y from r1/r0 per user."""
    m, k = mechanism.m, mechanism.k
    size = sum(per_cohort)
    var_y = np.zeros((m, k))
    for cohort in range(m):
        for value, count in zip(candidates, per_cohort, strict=True):
            bloom = bloom_mask(value, cohort, k, mechanism.h)
            for i in range(k):
                r = mechanism.r1 if (bloom >> i) & 1 else mechanism.r0
                var_y[cohort, i] += count * r * (1 - r)
    var_y /= size**2 * (mechanism.r1 - mechanism.r0) ** 2
    x = design_matrix(mechanism, list(range(m)), candidates)
    operator = np.linalg.solve(x.T @ x, x.T)  # equal weights: every cohort has `size` users
    return np.diag((operator * var_y.ravel()) @ operator.T)


@pytest.mark.parametrize("epsilon", [2.0, 7.0])
def test_rappor_standard_errors_are_calibrated_under_iid_sampling(epsilon: float) -> None:
    """Model (S): users, values and cohorts drawn afresh each repetition (numpy simulation).

    The reported SE must match the spread of β̂ (χ² band) and β̂ must be unbiased for the
    population shares π. At ε = 7 a diagonal-only covariance understates the SE of the most
    common candidate by about 20%, which this band catches.
    """
    from chorus_shared import campaign_from_spec

    campaign = campaign_from_spec({"name": "urls", "mechanism": "rappor", "epsilon": epsilon,
                                   "domain": {"kind": "strings"},
                                   "params": {"k": 32, "h": 2, "m": 16}})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    candidates = identifiable_candidates(mechanism, 8, "site")
    pi = np.array([0.35, 0.2, 0.15, 0.1, 0.08, 0.06, 0.04, 0.02])
    bloom = np.zeros((mechanism.m, len(candidates), mechanism.k), dtype=bool)
    for c in range(mechanism.m):
        for s, value in enumerate(candidates):
            mask = bloom_mask(value, c, mechanism.k, mechanism.h)
            bloom[c, s] = [(mask >> i) & 1 for i in range(mechanism.k)]
    estimator = estimator_for("rappor")
    rng = np.random.default_rng(11)
    n, reps = 4000, 600
    betas, variances = [], []
    for _ in range(reps):
        values = rng.choice(len(candidates), size=n, p=pi)
        cohorts = rng.integers(mechanism.m, size=n)
        rates = np.where(bloom[cohorts, values], mechanism.r1, mechanism.r0)
        bits = rng.random((n, mechanism.k)) < rates
        table = np.zeros((mechanism.m, mechanism.k + 1), dtype=np.int64)
        table[:, 0] = np.bincount(cohorts, minlength=mechanism.m)
        np.add.at(table[:, 1:], cohorts, bits.astype(np.int64))
        result = estimator.finalize(campaign, n, table.ravel(),
                                    Query(candidates=tuple(candidates)))
        betas.append([r.frequency for r in result.rows])
        variances.append([r.frequency_std_error**2 for r in result.rows])
    assert_calibrated(np.array(betas), np.array(variances), pi)


@pytest.mark.parametrize("campaign", _by_kind("krr", "rr"), ids=lambda c: c.name)
def test_krr_standard_errors_are_calibrated_under_iid_sampling(campaign: Campaign) -> None:
    """Users drawn afresh from π each repetition; k-RR sampled with numpy (the client's
    sampler is checked against the exact distribution in test_privacy)."""
    mechanism = campaign.mechanism
    assert isinstance(mechanism, KRR)
    d, n, reps = mechanism.d, 2000, 1000
    pi = np.array([1 / (v + 1) for v in range(d)])
    pi /= pi.sum()
    estimator = estimator_for(mechanism.name)
    rng = np.random.default_rng(5)
    estimates, variances = [], []
    for _ in range(reps):
        values = rng.choice(d, size=n, p=pi)
        keep = rng.random(n) < mechanism.p
        lie = rng.integers(d - 1, size=n)
        reports = np.where(keep, values, lie + (lie >= values))
        result = estimator.finalize(campaign, n, np.bincount(reports, minlength=d), Query())
        freq, se = frequency_values(result)
        estimates.append(freq)
        variances.append(se**2)
    assert_calibrated(np.array(estimates), np.array(variances), pi)


@pytest.mark.parametrize("campaign", _by_kind("duchi"), ids=lambda c: c.name)
def test_duchi_standard_error_is_calibrated_under_iid_sampling(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Duchi)
    lo, hi = mechanism.domain.lo, mechanism.domain.hi
    n, reps = 2000, 1000
    estimator = estimator_for("duchi")
    rng = np.random.default_rng(6)
    estimates, variances = [], []
    for _ in range(reps):
        t = 2 * rng.beta(2, 5, size=n) - 1  # a skewed population on [−1, 1]
        e = np.exp(mechanism.epsilon)
        bits = rng.random(n) < 0.5 + t * (e - 1) / (2 * (e + 1))
        result = estimator.finalize(campaign, n, np.bincount(bits, minlength=2), Query())
        estimates.append([result.mean])
        variances.append([result.std_error**2])
    truth = lo + (hi - lo) * (2 * 2 / 7 - 1 + 1) / 2  # Beta(2, 5) has mean 2/7
    assert_calibrated(np.array(estimates), np.array(variances), np.array([truth]))


MEAN_CAMPAIGNS = [c for c in CAMPAIGNS if c.mechanism.estimate_kind == "mean"]


def _report_variance(mechanism: Any, outputs: list[Any], t: float) -> float:
    return math.fsum(mechanism.output_probability(y, t) * mechanism.report_value(y) ** 2
                     for y in outputs) - t * t


@pytest.mark.parametrize("campaign", MEAN_CAMPAIGNS, ids=lambda c: c.name)
def test_mean_reports_are_exactly_unbiased(campaign: Campaign) -> None:
    """By enumeration, no sampling: Σ_y P(y | t)·t*(y) = t for every input, and where the
    mechanism states its per-report variance, Σ_y P(y | t)·t*(y)² − t² equals it."""
    mechanism = campaign.mechanism
    outputs = list(mechanism.outputs())
    for t in (-1.0, -0.77, -0.3, 0.0, 0.123, 0.5, 0.91, 1.0):
        mean = math.fsum(mechanism.output_probability(y, t) * mechanism.report_value(y)
                         for y in outputs)
        assert mean == pytest.approx(t, abs=1e-9)
        if hasattr(mechanism, "per_report_variance"):
            assert _report_variance(mechanism, outputs, t) == pytest.approx(
                mechanism.per_report_variance(t), rel=1e-9)


@pytest.mark.parametrize("campaign", MEAN_CAMPAIGNS, ids=lambda c: c.name)
def test_stated_variance_bounds_hold_and_are_tight(campaign: Campaign) -> None:
    """variance_bound(t) ≥ the enumerated Var[t* | t] everywhere, exceeding it by no more than
    the grid rounding (Λ²/4 for PM and HM; 1/4 of a Laplace step); worst_case_variance() is
    the largest bound (what the docs' comparison tables use)."""
    mechanism = campaign.mechanism
    outputs = list(mechanism.outputs())
    slack = 1e-12
    if mechanism.name in ("pm", "hm"):
        slack += mechanism.step**2 / 4  # type: ignore[attr-defined]
    elif mechanism.name == "laplace":
        slack += (2 / mechanism.resolution) ** 2 / 4  # type: ignore[attr-defined]
    grid = [i / 50 - 1 for i in range(101)]
    exact = [_report_variance(mechanism, outputs, t) for t in grid]
    bounds = [mechanism.variance_bound(t) for t in grid]  # type: ignore[attr-defined]
    for t, e, b in zip(grid, exact, bounds, strict=True):
        assert e - 1e-9 <= b <= e + slack + 1e-9, (t, e, b)
    assert mechanism.worst_case_variance() == pytest.approx(  # type: ignore[attr-defined]
        max(bounds), rel=1e-12)


@pytest.mark.parametrize("campaign", MEAN_CAMPAIGNS, ids=lambda c: c.name)
def test_mean_estimates_are_unbiased_with_the_exact_variance(campaign: Campaign) -> None:
    """Through the real randomizer and estimator; the exact per-report variance comes from the
    exact output distribution (rounding included): Σ_y P(y | t)·t*(y)² − t²."""
    from chorus_shared.mechanisms.piecewise import EPSILON_STAR

    mechanism = campaign.mechanism
    lo, hi = mechanism.domain.lo, mechanism.domain.hi  # type: ignore[union-attr]
    n, reps = (300, 500) if mechanism.name == "laplace" else (600, 1000)  # exact sampler: slow
    levels = [lo + (hi - lo) * i / 11 for i in range(12)]
    values = [levels[i % 12] for i in range(n)]
    inputs = [mechanism.encode(v) for v in values]
    truth = np.array([sum(values) / n])
    scale = (hi - lo) / 2
    outputs = list(mechanism.outputs())
    per_level = {t: _report_variance(mechanism, outputs, t) for t in set(inputs)}
    exact = np.array([scale**2 * sum(per_level[t] for t in inputs) / n**2])

    def extract(result: Any) -> tuple[np.ndarray, np.ndarray]:
        return np.array([result.mean]), np.array([result.std_error])

    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, reps, Query(), extract)
    assert_unbiased_with_exact_variance(estimates, truth, exact)
    if mechanism.name not in ("pm", "hm"):
        return
    from chorus_shared.mechanisms import HybridMechanism, PiecewiseMechanism

    assert isinstance(mechanism, PiecewiseMechanism | HybridMechanism)
    piecewise = mechanism if isinstance(mechanism, PiecewiseMechanism) else mechanism.pm
    z, e = piecewise.z, math.exp(mechanism.epsilon)
    for t, variance in per_level.items():
        if mechanism.name == "pm":  # the paper's t²/(z − 1) + (z + 3)/(3(z − 1)²) + rounding
            paper = t * t / (z - 1) + (z + 3) / (3 * (z - 1) ** 2)
        elif mechanism.epsilon > EPSILON_STAR:  # HM: flat in t (§9.5) + rounding
            paper = (z + 3) / (3 * z * (z - 1)) + (e + 1) ** 2 / (z * (e - 1) ** 2)
        else:  # HM below ε* is Duchi's C² − t² (no rounding)
            paper = ((e + 1) / (e - 1)) ** 2 - t * t
        assert paper - 1e-12 <= variance <= paper + mechanism.step**2 / 4 + 1e-12


@pytest.mark.parametrize("campaign", _by_kind("one_bit_mean"), ids=lambda c: c.name)
def test_one_bit_mean_follows_dky_formulas(campaign: Campaign) -> None:
    """1BitMean in DKY's own terms: π(x) = 1/(e^ε+1) + (x/m)(e^ε−1)/(e^ε+1), and
    μ̂ = (m/n)·Σ (b(e^ε+1) − 1)/(e^ε−1) (MECHANISMS.md §10.1), on [lo, hi] = [0, m]."""
    from chorus_shared.mechanisms import OneBitMean

    mechanism = campaign.mechanism
    assert isinstance(mechanism, OneBitMean)
    top = mechanism.domain.hi
    for x in (0.0, 0.1 * top, 0.5 * top, top):
        assert mechanism.output_probability(1, mechanism.encode(x)) == pytest.approx(
            mechanism.dky_probability(x), rel=1e-12)
    ones, n, e = 3_100, 10_000, math.exp(mechanism.epsilon)
    dky = top / n * (ones * (e + 1) - n) / (e - 1)
    result = estimator_for("one_bit_mean").finalize(campaign, n, np.array([n - ones, ones]),
                                                    Query())
    assert result.mean == pytest.approx(dky, rel=1e-12)


@pytest.mark.parametrize("campaign", _by_kind("dbitflip"), ids=lambda c: c.name)
def test_dbitflip_dky_estimator_is_unbiased_with_its_exact_variance(campaign: Campaign) -> None:
    """DKY's estimator conditions on the sampled buckets (MECHANISMS.md §10.2); its exact
    variance is below the pure-protocol one whenever b < d."""
    from chorus_shared.mechanisms import DBitFlip

    mechanism = campaign.mechanism
    assert isinstance(mechanism, DBitFlip)
    d, n = mechanism.d, 500  # n: the module docstring's power argument
    weights = [1 / (v + 1) ** 1.1 for v in range(d)]
    counts = [int(n * w / sum(weights)) for w in weights]
    counts[0] += n - sum(counts)
    inputs = [v for v, c in enumerate(counts) for _ in range(c)]
    truth = np.array(counts) / n
    z = mechanism.p_bit / (1 - mechanism.p_bit)
    scale = d / mechanism.b
    holders = np.array(counts)
    exact = ((n - holders) * scale * z / (z - 1) ** 2
             + holders * (scale * (z * z - z + 1) / (z - 1) ** 2 - 1)) / n**2
    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, 1000, Query(), frequency_values)
    assert_unbiased_with_exact_variance(estimates, truth, exact)
    p, q = mechanism.support_probabilities()
    pure = np.array([fixed_population_variance(n, f, p, q) for f in truth]) / n**2
    assert np.all(exact <= pure + 1e-15)
    assert mechanism.approximate_variance() == pytest.approx(scale * z / (z - 1) ** 2)
