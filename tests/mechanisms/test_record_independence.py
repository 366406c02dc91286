"""Independence tests of two record attributes (MECHANISMS-2.md §2.4, §2.5 check 5, erratum
§8.5, §6 item 8).

* The maximum-likelihood null fit behind Pearson's test on k-RR reports converges (KKT
  conditions, an independent optimizer) well before its step limit, at ε ∈ {0.5, 1, 4}.
* Type-I error at α = 0.05 over 2,000 runs under H₀, in the binomial band 0.05 ± 0.018
  (z = 3.66: 1e-3 Bonferroni over the four checks), for Pearson on k-RR reports and for the
  Wald test (OUE reports; pairs inside sets of three). Report counts are drawn from their
  exact distribution (tests/helpers/recordsim.py), which makes 2,000 runs cheap. Measured:
  Pearson 0.048 (2 × 3, ε = 1) and 0.0455 (3 × 3, ε = 2) at n = 5,000; Wald 0.0425 (OUE,
  3 × 4, ε = 1) and 0.054 (order 3, ε = 2) at n = 20,000 with the uncalibrated Wald test
  this file was written for; the calibrated one (test_record_test_calibration.py) passes the
  same checks.
* Power against a planted association rises with n: Pearson 0.35 → 0.90 (n = 3,000 →
  10,000; non-central χ² predicts 0.42 → 0.92), Wald on OUE 0.42 → 0.93.
* Negative control: Pearson's χ² on the *debiased* counts rejects 91% of the time under H₀.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import chi2, ncx2

import chorus_collector.estimators.record as record_estimators
from chorus_collector.estimators import Query
from chorus_collector.estimators.record import (
    MarginalsEstimator,
    Table,
    independent_fit,
    oracle_table,
    pearson_independence,
    wald_independence,
)
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.domain import Categories
from chorus_shared.mechanisms import KRR, Marginals, PureOracle
from chorus_shared.mechanisms.record import least_variance_oracle
from helpers.recordsim import draw_state, oracle_counts
from helpers.support import z_threshold


def _krr(epsilon: float, cells: int) -> tuple[float, float]:
    oracle = KRR.resolve(epsilon=epsilon, domain=Categories(tuple(map(str, range(cells)))),
                         params={})
    return oracle.support_probabilities()


def _log_likelihood(counts: np.ndarray, first: np.ndarray, second: np.ndarray, p: float,
                    q: float) -> float:
    return float(np.sum(counts * np.log(q + (p - q) * np.outer(first, second))))


def _kkt_residual(counts: np.ndarray, fit: np.ndarray, p: float, q: float) -> float:
    """How far the fit is from a constrained maximum, per report: on each simplex the
    gradient of the log-likelihood must equal its multiplier Σ x·∇ where the share is
    positive, and not exceed it where the share is 0."""
    gap, n = p - q, float(counts.sum())
    first, second = fit.sum(axis=1), fit.sum(axis=0)
    ratio = counts / (q + gap * np.outer(first, second))
    worst = 0.0
    for shares, gradient in ((first, gap * ratio @ second), (second, gap * ratio.T @ first)):
        excess = gradient - shares @ gradient
        worst = max(worst, float(np.max(np.abs(excess[shares > 0]))),
                    float(np.max(excess[shares <= 0], initial=0.0)))
    return worst / n


def _reference_maximum(counts: np.ndarray, p: float, q: float, starts: int = 12) -> float:
    """The best log-likelihood of SLSQP (bounds and both sums as constraints) from random
    starts: an optimizer that shares nothing with the EM/Newton fit."""
    k1, k2 = counts.shape
    rng = np.random.default_rng(5)

    def loss(z: np.ndarray) -> float:
        return -_log_likelihood(counts, z[:k1], z[k1:], p, q)

    best = -np.inf
    for _ in range(starts):
        start = np.concatenate((rng.dirichlet(np.ones(k1)), rng.dirichlet(np.ones(k2))))
        result = minimize(loss, start, method="SLSQP", bounds=[(0.0, 1.0)] * (k1 + k2),
                          constraints=[{"type": "eq", "fun": lambda z: z[:k1].sum() - 1},
                                       {"type": "eq", "fun": lambda z: z[k1:].sum() - 1}],
                          options={"ftol": 1e-14, "maxiter": 500})
        if result.success:
            best = max(best, -float(result.fun))
    return best


# Margins of typical pairs, one with a rare category so that at small n the maximum lies on
# the boundary (a share at exactly 0), where Newton's step is cut and EM crawls.
MARGINS = {
    (2, 2): ([0.7, 0.3], [0.45, 0.55]),
    (2, 3): ([0.6, 0.4], [0.2, 0.5, 0.3]),
    (3, 4): ([0.6, 0.39, 0.01], [0.1, 0.2, 0.3, 0.4]),
    (5, 5): ([0.3, 0.25, 0.2, 0.15, 0.1], [0.05, 0.1, 0.2, 0.3, 0.35]),
}


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("shape", list(MARGINS), ids=lambda s: f"{s[0]}x{s[1]}")
def test_independent_fit_reaches_the_maximum_well_before_the_step_limit(
        epsilon: float, shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: EM alone needed more than EM_MAX_STEPS (20,000) at ε = 0.5 over 3 × 4 cells
    and at ε = 1 over 5 × 5, and stopped (by its step-size rule) ~1e-3 per report away from
    the maximum's KKT conditions. With a fortieth of the steps allowed, the fit must satisfy
    them to 1e-8 (a constrained maximum) and, where campaigns use this test (k-RR is the
    less noisy oracle over the pair's cells), match an independent optimizer's likelihood.
    Elsewhere (ε = 1 over 25 cells, say: OUE and the Wald test there) the likelihood is flat
    enough at small n to have local maxima, which no start rules out."""
    monkeypatch.setattr(record_estimators, "EM_MAX_STEPS", record_estimators.EM_MAX_STEPS // 40)
    first, second = (np.array(m) for m in MARGINS[shape])
    cells = first.size * second.size
    p, q = _krr(epsilon, cells)
    campaigns_use_it = isinstance(least_variance_oracle(epsilon, Categories(
        tuple(map(str, range(cells))))), KRR)
    rng = np.random.default_rng(int(10 * epsilon) + 100 * first.size + second.size)
    for n in (500, 5_000, 50_000):
        channel = q + (p - q) * np.outer(first, second)
        for _ in range(2):
            counts = rng.multinomial(n, channel.ravel()).reshape(shape).astype(np.float64)
            fit = independent_fit(counts, p, q)
            assert fit.sum() == pytest.approx(1.0, abs=1e-12)
            assert np.all(fit >= 0)
            assert _kkt_residual(counts, fit, p, q) < 1e-8, (n, fit.sum(axis=1))
            if campaigns_use_it:
                found = _log_likelihood(counts, fit.sum(axis=1), fit.sum(axis=0), p, q)
                assert found >= _reference_maximum(counts, p, q) - 1e-7


# -- Size and power of the two tests -------------------------------------------------------

RUNS = 2_000
#: The rejection rates under H₀ must lie in the binomial band around α (Bonferroni over the
#: size checks below).
SIZE_CHECKS = 4
LEVEL = 0.05


def _size_band(runs: int = RUNS) -> tuple[float, float]:
    half = z_threshold(1e-3, SIZE_CHECKS) * math.sqrt(LEVEL * (1 - LEVEL) / runs)
    return LEVEL - half, LEVEL + half


def _pearson_rejects(oracle: PureOracle, joint: np.ndarray, n: int,
                     rng: np.random.Generator) -> bool:
    """One run of the k-RR path: the report counts of n users are exactly
    Multinomial(n, q + (p − q)π) (MECHANISMS-2.md §2.4(a))."""
    p, q = oracle.support_probabilities()
    counts = rng.multinomial(n, q + (p - q) * joint.ravel()).reshape(joint.shape)
    return pearson_independence(counts.astype(np.float64), p, q).p_value < LEVEL


def _oue_table(oracle: PureOracle, joint: np.ndarray, n: int,
               rng: np.random.Generator) -> Table:
    """The unbiased joint of n OUE reports over the pair's cells (values drawn first, then
    the bits, independent given the value: tests/helpers/recordsim.py)."""
    values = rng.multinomial(n, joint.ravel())
    flat = oracle_table(oracle, oracle_counts(oracle, values, rng).astype(np.float64), n)
    shape = joint.shape
    return Table(flat.f.reshape(shape), flat.v.reshape(shape), flat.u.reshape((*shape, -1)))


def _wald_rejects(oracle: PureOracle, joint: np.ndarray, n: int,
                  rng: np.random.Generator) -> bool:
    """The p-value only: the stated power (twice the p-value's simulation, drawn after it from
    the same seeded generator) changes nothing here."""
    return wald_independence(_oue_table(oracle, joint, n, rng), with_power=False).p_value \
        < LEVEL


def _oracle(epsilon: float, cells: int, name: str) -> PureOracle:
    oracle = least_variance_oracle(epsilon, Categories(tuple(map(str, range(cells)))))
    assert oracle.name == name  # the oracle a marginals campaign would use for this pair
    return oracle


def _planted(first: Sequence[float], second: Sequence[float], strength: float) -> np.ndarray:
    """(1 − δ)·π₁⊗π₂ + δ·D, D putting half its mass on each of cells (0, 0) and (1, 1)."""
    joint = np.outer(first, second)
    planted = np.zeros_like(joint)
    planted[0, 0] = planted[1, 1] = 0.5
    out: np.ndarray = (1 - strength) * joint + strength * planted
    return out


PEARSON_CASES = [((0.7, 0.3), (0.2, 0.5, 0.3), 1.0), ((0.5, 0.3, 0.2), (0.25, 0.25, 0.5), 2.0)]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second", "epsilon"), PEARSON_CASES,
                         ids=["2x3-eps1", "3x3-eps2"])
def test_pearson_on_krr_reports_has_the_nominal_size(
        first: tuple[float, ...], second: tuple[float, ...], epsilon: float) -> None:
    """Type-I error at α = 0.05 over 2,000 runs under H₀ (n = 5,000 reports), in the binomial
    band (erratum §8.5 measured 0.054 with its ML fit)."""
    joint = np.outer(first, second)
    oracle = _oracle(epsilon, joint.size, "krr")
    rng = np.random.default_rng(31 + joint.size)
    rate = np.mean([_pearson_rejects(oracle, joint, 5_000, rng) for _ in range(RUNS)])
    low, high = _size_band()
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


@pytest.mark.slow
def test_wald_on_oue_reports_has_the_nominal_size() -> None:
    """A pair whose 12 cells get OUE at ε = 1: the Wald test with the propagated covariance
    (n = 20,000; at 5,000 it is somewhat conservative, ≈ 0.04)."""
    joint = np.outer([0.5, 0.3, 0.2], [0.1, 0.2, 0.3, 0.4])
    oracle = _oracle(1.0, joint.size, "oue")
    rng = np.random.default_rng(32)
    rate = np.mean([_wald_rejects(oracle, joint, 20_000, rng) for _ in range(RUNS)])
    low, high = _size_band()
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


def _order3_campaign() -> Campaign:
    """Four attributes, sets of three (k-RR over 8 or 12 cells at ε = 2): each pair lies in
    two sets and has no set of its own, so its test is Wald's on the combined projections."""
    return campaign_from_spec({
        "name": "order3", "mechanism": "marginals", "epsilon": 2.0, "params": {"order": 3},
        "domain": {"kind": "record", "attributes": [
            {"name": f"a{i}", "values": [f"v{j}" for j in range(k)]}
            for i, k in enumerate((2, 3, 2, 2))]}})


def _order3_joint(rng: np.random.Generator) -> np.ndarray:
    """a0 ⟂ a1 (H₀ for that pair), a2 depending on both, a3 on a2."""
    first, second = np.array([0.6, 0.4]), np.array([0.2, 0.3, 0.5])
    third = rng.dirichlet(np.full(2, 2.0), size=(2, 3))  # P(a2 | a0, a1)
    fourth = np.array([[0.8, 0.2], [0.3, 0.7]])  # P(a3 | a2)
    joint: np.ndarray = np.einsum("a,b,abc,cd->abcd", first, second, third, fourth)
    return joint


@pytest.mark.slow
def test_wald_on_order3_sets_has_the_nominal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the estimator's own ``independence``, its Wald test without the stated power
    (which is simulated after the p-value and does not change it)."""
    monkeypatch.setattr(record_estimators, "wald_independence",
                        functools.partial(wald_independence, with_power=False))
    campaign = _order3_campaign()
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Marginals)
    estimator = MarginalsEstimator()
    assert len(estimator.holders(mechanism, (0, 1))) == 2
    rng = np.random.default_rng(33)
    joint = _order3_joint(rng)
    rejections = []
    for _ in range(RUNS):
        state = draw_state(mechanism, joint, 20_000, rng)
        test = estimator.independence(mechanism, estimator.set_tables(mechanism, state), state,
                                      (0, 1))
        assert test is not None and test.method.startswith("wald")
        rejections.append(test.p_value < LEVEL)
    rate = float(np.mean(rejections))
    low, high = _size_band()
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


def _power_rates(rejects: Callable[[np.random.Generator, int], bool], seed: int,
                 runs: int = 500) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    return {n: float(np.mean([rejects(rng, n) for _ in range(runs)])) for n in (3_000, 10_000)}


def _assert_power_rises(power: dict[int, float], runs: int = 500) -> None:
    low, high = power[3_000], power[10_000]
    spread = math.sqrt((low * (1 - low) + high * (1 - high)) / runs)
    assert low > LEVEL + 4 * math.sqrt(LEVEL * (1 - LEVEL) / runs), power
    assert high - low > 4 * spread, power


@pytest.mark.slow
def test_pearson_power_rises_with_n_as_the_noncentral_chi_square_predicts() -> None:
    """A planted association (δ = 0.15 towards the diagonal) over 2 × 3 cells at ε = 1:
    rejections at n = 3,000 and 10,000 (500 runs each) against the non-central χ² power of
    Pearson's test on the reports, non-centrality n·Σ(m₁ − m₀)²/m₀ (MECHANISMS-2.md §2.4),
    m₀ the channel at the product of the alternative's margins."""
    first, second, epsilon = PEARSON_CASES[0]
    joint = _planted(first, second, 0.15)
    oracle = _oracle(epsilon, joint.size, "krr")
    power = _power_rates(lambda rng, n: _pearson_rejects(oracle, joint, n, rng), seed=34)
    _assert_power_rises(power)
    p, q = oracle.support_probabilities()
    alternative = q + (p - q) * joint.ravel()
    null = q + (p - q) * np.outer(joint.sum(axis=1), joint.sum(axis=0)).ravel()
    df = (len(first) - 1) * (len(second) - 1)
    for n, rate in power.items():
        predicted = float(ncx2.sf(chi2.isf(LEVEL, df), df,
                                  n * np.sum((alternative - null) ** 2 / null)))
        # 4 binomial SEs, and 0.03 for the asymptotics and the ML fit's limit (the product of
        # the margins only approximately).
        assert abs(rate - predicted) < 4 * math.sqrt(predicted * (1 - predicted) / 500) + 0.03, \
            (n, rate, predicted)


@pytest.mark.slow
def test_wald_power_rises_with_n() -> None:
    joint = _planted((0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4), 0.2)
    oracle = _oracle(1.0, joint.size, "oue")
    _assert_power_rises(_power_rates(lambda rng, n: _wald_rejects(oracle, joint, n, rng),
                                     seed=35))


def _naive_debiased_chi_square(counts: np.ndarray, p: float, q: float) -> float:
    """The pitfall (MECHANISMS-2.md §2.4 (i), §6 item 8): Pearson's χ² on the *debiased* joint
    counts n·f̂ as if they were multinomial. Their variance is ~1/(p − q)² times larger, so the
    statistic is too; only a negative control, never offered by the estimator."""
    n = float(counts.sum())
    debiased = n * (counts / n - q) / (p - q)
    expected = np.outer(debiased.sum(axis=1), debiased.sum(axis=0)) / n
    statistic = float(np.sum((debiased - expected) ** 2 / expected))
    return float(chi2.sf(statistic, (counts.shape[0] - 1) * (counts.shape[1] - 1)))


def test_a_chi_square_on_debiased_counts_has_the_wrong_size() -> None:
    """Negative control: under the same H₀ as the Pearson size test, the naive statistic
    rejects most of the time (≈ 0.9 at ε = 1), far outside the band."""
    first, second, epsilon = PEARSON_CASES[0]
    joint = np.outer(first, second)
    oracle = _oracle(epsilon, joint.size, "krr")
    p, q = oracle.support_probabilities()
    rng = np.random.default_rng(36)
    rate = np.mean([_naive_debiased_chi_square(
        rng.multinomial(5_000, q + (p - q) * joint.ravel()).reshape(joint.shape), p, q) < LEVEL
        for _ in range(RUNS)])
    assert rate > 0.5 > _size_band()[1]


def test_answers_name_the_test_each_pair_gets() -> None:
    """Pearson on the reports where a k-RR marginal holds exactly the pair; Wald otherwise
    (OUE reports, or pairs inside sets of three)."""
    rng = np.random.default_rng(37)
    order2 = campaign_from_spec({
        "name": "order2", "mechanism": "marginals", "epsilon": 1.0,
        "domain": {"kind": "record", "attributes": [
            {"name": f"a{i}", "values": [f"v{j}" for j in range(k)]}
            for i, k in enumerate((3, 4, 2))]}})
    pairs: list[tuple[str, ...]] = [("a0", "a1"), ("a0", "a2"), ("a1", "a2"), ("a0", "a3"),
                                    ("a1", "a3"), ("a2", "a3")]
    expected = {order2.name: dict(zip(pairs[:3], ["wald", "pearson", "pearson"], strict=True)),
                "order3": dict.fromkeys(pairs, "wald")}
    for campaign in (order2, _order3_campaign()):
        mechanism = campaign.mechanism
        assert isinstance(mechanism, Marginals)
        sizes = mechanism.domain.sizes
        joint = np.full(sizes, 1 / math.prod(sizes))
        state = draw_state(mechanism, joint, 20_000, rng)
        answer = MarginalsEstimator().finalize(campaign, 20_000, state, Query())
        assert {j.attributes for j in answer.joints} == set(expected[campaign.name])
        for j in answer.joints:
            assert j.independence is not None
            assert j.independence.method.startswith(expected[campaign.name][j.attributes]), \
                (j.attributes, j.independence)
