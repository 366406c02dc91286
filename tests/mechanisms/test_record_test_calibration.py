"""The independence tests' size at every ε and their stated power (issue 34, item 4).

The old Wald test rejected 0.5–2.5% of independent OUE pairs at ε = 0.5 (n = 1,000–3,000),
where 5% was claimed. The calibrated test (``estimators/independence.py``) must hold its size
at ε = 0.5 and at ε ≥ 1, Pearson's on k-RR reports too, and the power it states must match
simulation.

* Size: the rejection rate at 0.05 over 2,000 runs under H₀ in the binomial band 0.05 ± 0.019
  (z = 3.9: 1e-3 Bonferroni over the 6 size checks here). The simulated test's own size is
  19/400 = 0.0475 under its Gaussian null, inside the band.
  At the ends of the default ε range (0.25 and 2), the rate must be consistent with a size
  in 4–6%.
* Power: the Wald test's power is simulated against the critical value it uses
  (``wald_power``, and the figure every answer states, averaged over directions); the
  non-central χ² it replaced was optimistic by up to 0.30 at ε = 0.5. Each check: the rejection
  rate within binomial SEs (1e-3 Bonferroni) of the stated power, at ε = 0.25–2. Pearson's
  test on k-RR reports keeps the non-central χ², which simulation bears out.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import chdtri, chndtr

from chorus_collector.estimators import Query
from chorus_collector.estimators.independence import (
    CALIBRATED_MAX_CELLS,
    CALIBRATION_DRAWS,
    LEVEL,
    contrast_covariance,
    directions,
    noncentrality,
    table_power,
    wald_power,
)
from chorus_collector.estimators.record import (
    MarginalsEstimator,
    Table,
    oracle_table,
    pearson_independence,
    wald_independence,
)
from chorus_shared import campaign_from_spec
from chorus_shared.domain import Categories
from chorus_shared.mechanisms import OUE, PureOracle
from chorus_shared.mechanisms.record import least_variance_oracle
from helpers.recordsim import draw_state, oracle_counts
from helpers.support import z_threshold

RUNS = 2_000
SIZE_CHECKS = 6


def _band() -> tuple[float, float]:
    half = z_threshold(1e-3, SIZE_CHECKS) * math.sqrt(LEVEL * (1 - LEVEL) / RUNS)
    return LEVEL - half, LEVEL + half


def _oracle(epsilon: float, cells: int, name: str) -> PureOracle:
    oracle = least_variance_oracle(epsilon, Categories(tuple(map(str, range(cells)))))
    assert oracle.name == name  # what a marginals campaign uses for this pair
    return oracle


def _table(oracle: PureOracle, joint: np.ndarray, n: int, rng: np.random.Generator) -> Table:
    values = rng.multinomial(n, joint.ravel())
    counts = oracle_counts(oracle, values, rng).astype(np.float64)
    return oracle_table(oracle, counts, n).reshaped(joint.shape)


def _expected_table(oracle: PureOracle, joint: np.ndarray, n: int) -> Table:
    """The table at the expected support counts: its covariance is the true one."""
    p, q = oracle.support_probabilities()
    return oracle_table(oracle, n * (q + (p - q) * joint.ravel()), n).reshaped(joint.shape)


WALD_CASES = [  # (first margin, second margin, ε, n): OUE over the pair's cells
    ((0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4), 0.5, 3_000),  # the setting
    ((0.5, 0.3, 0.2), (0.3, 0.3, 0.4), 0.5, 1_000),
    ((0.6, 0.4), (0.25, 0.25, 0.25, 0.25), 0.5, 3_000),
    ((0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4), 1.0, 3_000),
    ((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 1.5, 5_000),
]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second", "epsilon", "n"), WALD_CASES,
                         ids=["3x4-eps0.5-n3000", "3x3-eps0.5-n1000", "2x4-eps0.5-n3000",
                              "3x4-eps1-n3000", "4x4-eps1.5-n5000"])
def test_the_calibrated_wald_test_has_the_nominal_size(
        first: tuple[float, ...], second: tuple[float, ...], epsilon: float, n: int) -> None:
    """Measured: 0.047, 0.054, 0.0475, 0.043, 0.047 (the old test: 0.021, 0.013, 0.021,
    0.025, –)."""
    joint = np.outer(first, second)
    oracle = _oracle(epsilon, joint.size, "oue")
    rng = np.random.default_rng(3_400 + joint.size + int(10 * epsilon))
    rate = float(np.mean([wald_independence(_table(oracle, joint, n, rng), with_power=False)
                          .p_value < LEVEL for _ in range(RUNS)]))
    low, high = _band()
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


@pytest.mark.slow
def test_pearson_on_krr_reports_has_the_nominal_size_at_small_epsilon() -> None:
    """2 × 3 cells at ε = 0.5 (k-RR: fewer than 3e^ε + 2 cells), n = 3,000. Measured 0.052."""
    joint = np.outer((0.7, 0.3), (0.2, 0.5, 0.3))
    oracle = _oracle(0.5, joint.size, "krr")
    p, q = oracle.support_probabilities()
    rng = np.random.default_rng(3_410)
    rate = float(np.mean([pearson_independence(
        rng.multinomial(3_000, q + (p - q) * joint.ravel()).reshape(joint.shape)
        .astype(np.float64), p, q).p_value < LEVEL for _ in range(RUNS)]))
    low, high = _band()
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


#: The size checks at the ends of the ε a report may spend by default (the client refuses more
#: than 2; the cases above hold ε = 0.5–1.5): (test, ε, n, first margin, second margin).
EDGE_SIZE_CASES = [
    ("wald", 0.25, 3_000, (0.4, 0.3, 0.3), (0.3, 0.3, 0.4)),
    ("wald", 2.0, 1_000, (0.4, 0.3, 0.3), (0.3, 0.3, 0.4)),
    ("pearson", 2.0, 1_000, (0.7, 0.3), (0.2, 0.5, 0.3)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("test", "epsilon", "n", "first", "second"), EDGE_SIZE_CASES,
                         ids=[f"{c[0]}-eps{c[1]:g}-n{c[2]}" for c in EDGE_SIZE_CASES])
def test_each_test_holds_a_size_of_4_to_6_percent_at_the_edges_of_epsilon(
        test: str, epsilon: float, n: int, first: tuple[float, ...],
        second: tuple[float, ...]) -> None:
    """2,000 runs under independence (Wald on OUE over the pair's cells, Pearson on k-RR
    reports): the rate is consistent with a size in [0.04, 0.06], i.e. above 0.04 and below
    0.06 by less than the binomial tolerance (1e-3 Bonferroni over these checks). Measured
    0.050, 0.0495, 0.0535 (Pearson at ε = 1, n = 3,000, measured only: 0.041)."""
    joint = np.outer(first, second)
    rng = np.random.default_rng(3_450 + int(100 * epsilon) + joint.size)
    if test == "wald":
        oracle: PureOracle = OUE(epsilon=epsilon, domain=Categories(tuple(map(str, range(9)))))
        rate = float(np.mean([wald_independence(_table(oracle, joint, n, rng), with_power=False)
                              .p_value < LEVEL for _ in range(RUNS)]))
    else:
        oracle = _oracle(epsilon, joint.size, "krr")
        p, q = oracle.support_probabilities()
        reported = q + (p - q) * joint.ravel()
        rate = float(np.mean([pearson_independence(
            rng.multinomial(n, reported / reported.sum()).reshape(joint.shape)
            .astype(np.float64), p, q).p_value < LEVEL for _ in range(RUNS)]))
    z = z_threshold(1e-3, len(EDGE_SIZE_CASES))
    low = 0.04 - z * math.sqrt(0.04 * 0.96 / RUNS)
    high = 0.06 + z * math.sqrt(0.06 * 0.94 / RUNS)
    assert low < rate < high, f"size {rate:.4f} outside [{low:.4f}, {high:.4f}]"


def _planted(first: tuple[float, ...], second: tuple[float, ...],
             strength: float) -> np.ndarray:
    """(1 − δ)·π₁⊗π₂ + δ·D, D half on cell (0, 0) and half on (1, 1)."""
    planted = np.zeros((len(first), len(second)))
    planted[0, 0] = planted[1, 1] = 0.5
    joint: np.ndarray = (1 - strength) * np.outer(first, second) + strength * planted
    return joint


def _tolerance(stated: float, runs: int, checks: int) -> float:
    """k binomial SEs of a rejection rate over ``runs`` plus the stated figure's own
    simulation error (CALIBRATION_DRAWS draws), k for 1e-3 Bonferroni over ``checks``."""
    spread = stated * (1 - stated)
    return z_threshold(1e-3, checks) * math.sqrt(spread / runs + spread / CALIBRATION_DRAWS)


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "n", "strength", "seed"), [
    (0.5, 3_000, 0.5, 3_422),    # the strongly dependent pair, w = 0.70
    (0.5, 30_000, 0.15, 3_421),  # w = 0.28
], ids=["eps0.5-n3000-w0.70", "eps0.5-n30000-w0.28"])
def test_the_power_against_a_planted_association_matches_simulation(
        epsilon: float, n: int, strength: float, seed: int) -> None:
    """3 × 4 OUE, association planted as (1 − δ)·π₁⊗π₂ + δ·(half on two diagonal cells), 400
    runs: the rejection rate within the tolerance of ``wald_power`` at the true joint.
    Measured (runs, stated; the non-central χ² it replaced): 0.42, 0.46 (0.72); 0.63, 0.59
    (0.69). At ε = 1, n = 10,000, w = 0.36: 0.97, 0.98 (0.985)."""
    first, second = (0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4)
    joint = _planted(first, second, strength)
    oracle = _oracle(epsilon, joint.size, "oue")
    truth = _expected_table(oracle, joint, n)
    association = joint - np.outer(joint.sum(axis=1), joint.sum(axis=0))
    stated = wald_power(truth.f, truth.v, truth.u, association)
    rng = np.random.default_rng(seed)
    runs = 400
    rate = float(np.mean([wald_independence(_table(oracle, joint, n, rng), with_power=False)
                          .p_value < LEVEL for _ in range(runs)]))
    assert abs(rate - stated) < _tolerance(stated, runs, 2), (rate, stated)


#: (ε, n): the ε a campaign may spend on one report up to the client's default cap of 2, with
#: n where the answer's power against w = 0.3 is near one half (ε = 1, n = 3,000 measured only:
#: 0.53 against 0.48 stated, 0.57 before).
STATED_POWER_CASES = [(0.25, 40_000), (0.5, 12_000), (2.0, 1_000)]


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "n"), STATED_POWER_CASES,
                         ids=[f"eps{e:g}-n{n}" for e, n in STATED_POWER_CASES])
def test_the_power_an_answer_states_matches_simulation_at_every_epsilon(
        epsilon: float, n: int) -> None:
    """The figure an answer states for w = 0.3 (averaged over directions) against the test's
    rejection rate when each of 1,200 runs draws its own direction of w = 0.3 around
    π₀ = (0.4, 0.3, 0.3) ⊗ (0.3, 0.3, 0.4) (3 × 3 OUE; every such joint is valid, since
    |d_c| < w·√π₀_c ≤ π₀_c). Measured at 600 runs (rate, mean stated; the non-central χ² at
    the mean λ it replaced): ε = 0.25: 0.41, 0.39 (0.47); 0.5: 0.48, 0.47 (0.56); 1: 0.53,
    0.48 (0.57); 2: 0.67, 0.66 (0.73)."""
    first, second = np.array((0.4, 0.3, 0.3)), np.array((0.3, 0.3, 0.4))
    independent = np.outer(first, second)
    oracle = OUE(epsilon=epsilon, domain=Categories(tuple(map(str, range(9)))))
    rng = np.random.default_rng(3_430 + int(100 * epsilon))
    runs = 1_200
    rejected, stated = [], []
    for unit in directions(first, second, rng, runs):
        joint = independent + 0.3 * unit
        assert joint.min() >= 0.0
        test = wald_independence(_table(oracle, joint / joint.sum(), n, rng))
        rejected.append(test.p_value < LEVEL)
        stated.append(next(p.power for p in test.power if p.effect == 0.3))
    rate, mean_stated = float(np.mean(rejected)), float(np.mean(stated))
    # The mean of the runs' stated figures: its simulation error averages out over the runs.
    tolerance = z_threshold(1e-3, len(STATED_POWER_CASES)) * math.sqrt(
        (rate * (1 - rate) + float(np.var(stated))) / runs)
    assert abs(rate - mean_stated) < tolerance, (rate, mean_stated)


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "n", "strength"), [(0.5, 3_000, 0.4), (2.0, 1_000, 0.15)],
                         ids=["eps0.5", "eps2"])
def test_pearsons_power_matches_simulation(epsilon: float, n: int, strength: float) -> None:
    """Pearson's test on 2 × 3 k-RR reports, the association planted on two cells, 1,000
    runs: the non-central χ² at λ = dᵀC⁻¹d within the binomial tolerance. Measured 0.53 /
    0.535 and 0.65 / 0.66 (ε = 1, n = 2,000, δ = 0.2: 0.47 / 0.45)."""
    joint = _planted((0.7, 0.3), (0.2, 0.5, 0.3), strength)
    oracle = _oracle(epsilon, joint.size, "krr")
    p, q = oracle.support_probabilities()
    truth = _expected_table(oracle, joint, n)
    association = joint - np.outer(joint.sum(axis=1), joint.sum(axis=0))
    stated = float(1 - chndtr(chdtri(2, LEVEL), 2, noncentrality(
        contrast_covariance(joint, truth.v, truth.u), association)))
    reported = q + (p - q) * joint.ravel()
    rng = np.random.default_rng(3_440 + int(10 * epsilon))
    runs = 1_000
    rate = float(np.mean([pearson_independence(
        rng.multinomial(n, reported / reported.sum()).reshape(joint.shape)
        .astype(np.float64), p, q).p_value < LEVEL for _ in range(runs)]))
    tolerance = z_threshold(1e-3, 2) * math.sqrt(stated * (1 - stated) / runs)
    assert abs(rate - stated) < tolerance, (rate, stated)


def test_the_stated_power_grows_with_n_and_effect_and_says_when_it_is_small() -> None:
    """The power in the answer (typical direction, estimated margins) at the issue's setting
    (OUE, 3 × 4, ε = 0.5) is small at n = 3,000 even against a medium association, and
    grows with n and with w."""
    joint = np.outer((0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4))
    oracle = _oracle(0.5, joint.size, "oue")
    by_n = {}
    for n in (3_000, 30_000, 300_000):
        table = _expected_table(oracle, joint, n)
        by_n[n] = [p.power for p in table_power(table.f, table.v, table.u)]
    assert by_n[3_000][1] < 0.15  # w = 0.3: a test with no power, and the answer says so
    assert by_n[300_000][1] > 0.99
    for n, (small, medium) in by_n.items():
        assert LEVEL < small < medium, n
    assert by_n[3_000][0] < by_n[30_000][0] < by_n[300_000][0]


def test_the_p_value_is_a_function_of_the_reports() -> None:
    """The simulation is seeded from the table: one answer, one p-value."""
    oracle = _oracle(0.5, 12, "oue")
    joint = np.outer((0.5, 0.3, 0.2), (0.1, 0.2, 0.3, 0.4))
    first, second = (_table(oracle, joint, 3_000, np.random.default_rng(1)) for _ in range(2))
    assert wald_independence(first) == wald_independence(second)


def test_a_pair_too_large_to_calibrate_gets_no_test_and_says_why() -> None:
    """9 × 8 = 72 cells > 64 at ε = 0.5: no test (the χ² reference rejects most independent
    pairs there), a warning instead; Pearson's pairs and small OUE pairs state their power."""
    campaign = campaign_from_spec({
        "name": "wide", "mechanism": "marginals", "epsilon": 0.5,
        "domain": {"kind": "record", "attributes": [
            {"name": "a", "values": [f"v{j}" for j in range(9)]},
            {"name": "b", "values": [f"v{j}" for j in range(8)]},
            {"name": "c", "values": ["no", "yes"]}]}})
    mechanism = campaign.mechanism
    sizes = mechanism.domain.sizes
    joint = np.full(sizes, 1 / math.prod(sizes))
    state = draw_state(mechanism, joint, 30_000, np.random.default_rng(2))
    answer = MarginalsEstimator().finalize(campaign, 30_000, state, Query())
    tests = {j.attributes: j.independence for j in answer.joints}
    assert CALIBRATED_MAX_CELLS < 9 * 8
    assert tests[("a", "b")] is None
    assert any("no independence test for a × b" in w for w in answer.warnings)
    for pair in (("a", "c"), ("b", "c")):
        test = tests[pair]
        assert test is not None and [p.effect for p in test.power] == [0.1, 0.3]
        assert all(0.0 < p.power < 1.0 for p in test.power)
    body = answer.to_json()["joints"]
    assert body[1]["independence"]["power"][0]["cohens_w"] == 0.1
