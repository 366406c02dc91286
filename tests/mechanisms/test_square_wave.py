"""Square Wave decoded by EM / EMS (MECHANISMS-2.md §1.1; §1.5 checks 3, 4 and 9; §8 item 4).

The state of a Square Wave campaign is the vector of report counts per output bucket, and for
n values drawn i.i.d. from bucket shares θ (uniform inside each bucket) it is *exactly*
Multinomial(n, Mθ). Most tests therefore draw the state directly from that multinomial (fast,
and no approximation); the transition matrix M itself is checked against the randomizer.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from chorus_collector.estimators import Query
from chorus_collector.estimators.distribution import FittedDistribution, quantile_of
from chorus_collector.estimators.square_wave import (
    INTERVALS,
    LOGLIK_TOLERANCE,
    METHODS,
    NO_INTERVALS_WARNING,
    SquareWaveEstimator,
    em_fit,
    loglik_tolerance,
    smooth,
    smoothing_weight,
    transition_matrix,
)
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.mechanisms import SquareWave
from helpers.examples import EXAMPLES
from helpers.support import z_threshold

ALPHA = 1e-6
ESTIMATOR = SquareWaveEstimator()


def sw_campaign(epsilon: float = 1.0, buckets: int = 256, output_buckets: int | None = None,
                lo: float = 0.0, hi: float = 1.0, scale: str = "linear") -> Campaign:
    params: dict[str, object] = {"buckets": buckets, "scale": scale}
    if output_buckets is not None:
        params["output_buckets"] = output_buckets
    return campaign_from_spec({"name": "sw-test", "mechanism": "sw", "epsilon": epsilon,
                               "domain": {"kind": "numeric", "lo": lo, "hi": hi},
                               "params": params})


def sw(**kwargs: object) -> SquareWave:
    mechanism = sw_campaign(**kwargs).mechanism  # type: ignore[arg-type]
    assert isinstance(mechanism, SquareWave)
    return mechanism


def lognormal_shares(buckets: int, median: float = 0.2, sigma: float = 0.6) -> np.ndarray:
    """Bucket shares on [0, 1] of a log-normal latency clipped at 1 (as the device clips): a
    mode near 0.15, a long right tail, p95 ≈ 0.54."""
    edges = np.linspace(0.0, 1.0, buckets + 1)
    cdf = np.array([0.0] + [0.5 * math.erfc(-math.log(e / median) / (sigma * math.sqrt(2)))
                            for e in edges[1:]])
    cdf[-1] = 1.0
    return np.diff(cdf)


def true_cdf(theta: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(theta)])


def draw_state(mechanism: SquareWave, theta: np.ndarray, n: int, seed: int) -> np.ndarray:
    """The exact distribution of the folded state for n i.i.d. values with bucket shares θ."""
    outputs = transition_matrix(mechanism) @ theta
    return np.random.default_rng(seed).multinomial(n, outputs / outputs.sum())


# ---------------------------------------------------------------- the transition matrix (check 3)

UNIT = {"kind": "numeric", "lo": 0, "hi": 1}
MATRIX_CASES = [
    *EXAMPLES["sw"],
    {"epsilon": 1.0, "domain": UNIT, "params": {"buckets": 32, "output_buckets": 45}},
    # A wave narrower than an input bucket.
    {"epsilon": 4.0, "domain": UNIT, "params": {"buckets": 20, "output_buckets": 64}},
    {"epsilon": 0.1, "domain": UNIT, "params": {"buckets": 2, "output_buckets": 2}},
]


def mechanism_of(spec: dict[str, object]) -> SquareWave:
    mechanism = campaign_from_spec({"name": "sw-spec", "mechanism": "sw", **spec}).mechanism
    assert isinstance(mechanism, SquareWave)
    return mechanism


@pytest.mark.parametrize("spec", MATRIX_CASES, ids=lambda s: f"eps{s['epsilon']}-"
                         f"{s['params']['buckets']}-{s['params'].get('output_buckets', '')}")
def test_transition_matrix_is_the_channel_averaged_over_each_bucket(spec: dict[str, object]
                                                                    ) -> None:
    mechanism = mechanism_of(spec)
    matrix = transition_matrix(mechanism)
    buckets = mechanism.buckets
    assert matrix.shape == (mechanism.output_buckets, buckets)
    assert np.max(np.abs(matrix.sum(axis=0) - 1)) < 1e-12
    # The midpoint rule on K points per bucket: P(j | v) is piecewise linear in v with at most
    # four kinks, each costing ≤ |p − q|·h²/8 (h = 1/(D·K) the step) in the integral, so the
    # average errs by ≤ |p − q|/(2·D·K²): 3e-7 in the worst case here (ε = 4, D = 20).
    points = 1000
    columns = range(buckets) if buckets <= 8 else sorted({0, 1, buckets // 2, buckets - 1})
    for i in columns:
        vs = (i + (np.arange(points) + 0.5) / points) / buckets
        column = [np.mean([mechanism.output_probability(j, v) for v in vs])
                  for j in range(mechanism.output_buckets)]
        assert np.max(np.abs(np.array(column) - matrix[:, i])) < 1e-6, i
    assert not matrix.flags.writeable  # shared through the cache


def test_transition_matrix_is_cached_per_mechanism() -> None:
    assert transition_matrix(sw(buckets=64)) is transition_matrix(sw(buckets=64))


@pytest.mark.parametrize("spec", EXAMPLES["sw"], ids=["sw-0", "sw-1"])
def test_transition_matrix_matches_the_randomizer(spec: dict[str, object]) -> None:
    """Monte Carlo through the client's own randomizer: v uniform in bucket i, 20,000 draws
    per bucket; every cell's frequency within a binomial z band (Bonferroni over all cells)."""
    mechanism = mechanism_of(spec)
    matrix = transition_matrix(mechanism)
    rng = random.Random(7)
    draws = 20_000
    z = z_threshold(ALPHA, matrix.size)
    for i in range(mechanism.buckets):
        counts = np.zeros(mechanism.output_buckets)
        for _ in range(draws):
            counts[mechanism.randomize((i + rng.random()) / mechanism.buckets, rng)] += 1
        expected = matrix[:, i]
        scores = (counts / draws - expected) / np.sqrt(expected * (1 - expected) / draws)
        assert np.max(np.abs(scores)) < z, (i, np.round(scores, 2))


# ---------------------------------------------------------------- EM and EMS (check 4)

def em_step(matrix: np.ndarray, counts: np.ndarray, theta: np.ndarray) -> np.ndarray:
    updated: np.ndarray = theta * (matrix.T @ (counts / (matrix @ theta))) / counts.sum()
    return updated


def loglik(matrix: np.ndarray, counts: np.ndarray, theta: np.ndarray) -> float:
    return float(counts @ np.log(matrix @ theta))


def test_em_stops_at_a_fixed_point_and_never_lowers_the_likelihood() -> None:
    mechanism = sw(epsilon=1.0, buckets=48)
    matrix = transition_matrix(mechanism)
    n = 100_000
    counts = draw_state(mechanism, lognormal_shares(48), n, seed=3).astype(float)
    fit = em_fit(matrix, counts, n, smoothing=False, trace=True)
    theta = fit.theta[:, 0]
    assert fit.converged[0]
    assert theta.min() >= 0 and abs(theta.sum() - 1) < 1e-12
    trace = np.array(fit.loglik_trace)
    assert len(trace) == fit.iterations[0] + 1
    # EM is monotone: L never drops beyond rounding (|L| ≈ 4e5, 64-bit sums).
    assert np.all(np.diff(trace) > -1e-9 * abs(trace[0]))
    # Fixed point. For mixture weights, L(EM(θ)) − L(θ) ≥ n·KL(EM(θ) ‖ θ) ≥ (n/2)‖EM(θ) − θ‖₁²
    # (Jensen, then Pinsker): a step whose likelihood gain is below τ moves θ by at most
    # sqrt(2τ/n) in L1 (≈ 1.4e-4 here).
    following = em_step(matrix, counts, theta)
    gain = loglik(matrix, counts, following) - loglik(matrix, counts, theta)
    assert 0 <= gain < LOGLIK_TOLERANCE
    assert np.abs(following - theta).sum() <= math.sqrt(2 * gain / n) + 1e-12
    assert np.abs(following - theta).sum() <= math.sqrt(2 * LOGLIK_TOLERANCE / n)


def two_bucket_case(share_low: float, n: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    mechanism = sw(epsilon=1.0, buckets=2, output_buckets=2)
    matrix = transition_matrix(mechanism)
    low = round(share_low * n)
    return matrix, np.array([low, n - low], dtype=float)


def test_em_reaches_the_closed_form_mle_inside_the_simplex() -> None:
    """D = m̃ = 2: the likelihood c₀ ln(Mθ)₀ + c₁ ln(Mθ)₁ over one free share is maximised
    where Mθ = c/n, i.e. θ = M⁻¹c/n, whenever that lies in the simplex."""
    matrix, counts = two_bucket_case(0.55)
    expected = np.linalg.solve(matrix, counts / counts.sum())
    assert expected.min() > 0  # inside: the channel keeps P(report 0) in [1 − a, a], a ≈ 0.64
    # n only sets the ‖Δθ‖₁ ≤ 1/n rule: a huge n and a tiny τ make EM run to its limit.
    fit = em_fit(matrix, counts, 10**15, smoothing=False, tolerance=1e-13,
                 max_iterations=100_000)
    assert np.allclose(fit.theta[:, 0], expected, atol=1e-6)


def test_em_goes_to_the_boundary_when_the_closed_form_leaves_the_simplex() -> None:
    matrix, counts = two_bucket_case(0.80)  # more reports in bucket 0 than any θ can explain
    assert np.linalg.solve(matrix, counts / counts.sum()).min() < 0
    fit = em_fit(matrix, counts, 10**15, smoothing=False, tolerance=1e-13,
                 max_iterations=100_000)
    # On the boundary the likelihood's slope is strictly negative, so EM approaches θ = (1, 0)
    # geometrically.
    assert fit.theta[1, 0] < 1e-8


def test_smoothing_kernel_by_hand() -> None:
    # Interior (1, 2, 1)/4, ends (2, 1)/3 and (1, 2)/3: [8/3, 1, 2, 16/3], which sums to 11.
    raw = np.array([4.0, 0.0, 0.0, 8.0])
    assert np.allclose(smooth(raw), np.array([8 / 3, 1, 2, 16 / 3]) / 11, atol=1e-15)
    # Symmetric: reversing the input reverses the output (the reference code's last row is
    # not smoothed at all, MECHANISMS-2.md §6 item 2).
    x = np.random.default_rng(0).random(9)
    assert np.allclose(smooth(x[::-1]), smooth(x)[::-1], atol=1e-15)
    # Columns of a matrix are smoothed one by one (the bootstrap's D × R form).
    block = np.random.default_rng(1).random((9, 3))
    assert np.allclose(smooth(block), np.stack([smooth(block[:, r]) for r in range(3)],
                                               axis=1), atol=1e-15)
    assert np.allclose(smooth(np.array([1.0, 3.0])), np.array([5, 7]) / 12, atol=1e-15)


def test_ems_does_not_stop_at_the_first_likelihood_drop() -> None:
    """§8 item 4: the stopping rule reads |ΔL| < τ. Two spikes at ε = 4: EMS's smoothing step
    lowers L by more than τ long before it converges; a signed reading ("the improvement is
    below τ") would have stopped right there."""
    mechanism = sw(epsilon=4.0, buckets=64)
    theta = np.zeros(64)
    theta[[16, 48]] = 0.5
    n = 10_000
    counts = draw_state(mechanism, theta, n, seed=0).astype(float)
    fit = em_fit(transition_matrix(mechanism), counts, n, smoothing=True, trace=True)
    changes = np.diff(np.array(fit.loglik_trace))  # changes[t − 1] = L_t − L_{t−1}
    signed_stop = next(t for t in range(2, len(changes) + 1) if changes[t - 1] < LOGLIK_TOLERANCE)
    assert changes[signed_stop - 1] < -LOGLIK_TOLERANCE  # it would stop on a drop …
    assert fit.iterations[0] > signed_stop + 10  # … but EMS goes on
    assert fit.converged[0]
    # And it stops at the first iteration (t ≥ 2) where |ΔL| < τ, or θ moved ≤ 1/n.
    last = int(fit.iterations[0])
    assert all(abs(changes[t - 1]) >= LOGLIK_TOLERANCE for t in range(2, last))


def test_replicates_in_one_matrix_equal_separate_fits() -> None:
    """The bootstrap runs R fits as one D × R iteration, each with its own stopping rule."""
    mechanism = sw(epsilon=1.0, buckets=64)
    matrix = transition_matrix(mechanism)
    theta = lognormal_shares(64)
    columns = np.stack([draw_state(mechanism, theta, 20_000, seed) for seed in range(4)],
                       axis=1)
    together = em_fit(matrix, columns, 20_000, smoothing=True)
    for r in range(4):
        alone = em_fit(matrix, columns[:, r], 20_000, smoothing=True)
        assert alone.iterations[0] == together.iterations[r]
        assert np.allclose(alone.theta[:, 0], together.theta[:, r], atol=1e-12)
    assert len(set(together.iterations.tolist())) > 1  # they did stop at different times


# ---------------------------------------------------------------- accuracy (check 9)

def distances(theta: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """(Wasserstein-1, Kolmogorov–Smirnov) between the CDFs on [0, 1], both piecewise linear
    between the bucket edges: W1 = ∫|F̂ − F| (exact up to the sign changes inside buckets)."""
    gap = np.abs(true_cdf(theta) - true_cdf(truth))
    return float((gap[:-1] + gap[1:]).sum() / (2 * len(theta))), float(gap.max())


def test_error_shrinks_with_n_and_ems_beats_em() -> None:
    """ε = 1, D = m̃ = 256, a log-normal shape, three seeds per n. Measured (mean W1 over the
    seeds): EMS 0.0118 / 0.0064 / 0.0042 at n = 10⁴ / 10⁵ / 10⁶, EM 0.0164 / 0.0084 / 0.0032
    (mean KS: EMS 0.037 / 0.033 / 0.031, EM 0.088 / 0.040 / 0.014). EMS wins up to 10⁵ but does
    *not* shrink like n^(−1/2): its smoothing bias does not vanish with n (the EM map depends on
    the data only through c/n, so EMS's fixed point on the exact expected counts nMθ is not θ:
    W1 = 0.0041, KS = 0.032 there), and at 10⁶ its error is almost all that bias."""
    mechanism = sw(epsilon=1.0, buckets=256)
    matrix = transition_matrix(mechanism)
    truth = lognormal_shares(256)
    w1, ks = {}, {}
    for n in (10**4, 10**5, 10**6):
        states = np.stack([draw_state(mechanism, truth, n, seed) for seed in range(3)], axis=1)
        fits = em_fit(matrix, states, n, smoothing=True).theta
        pairs = np.array([distances(fits[:, r], truth) for r in range(3)])
        w1[n], ks[n] = pairs[:, 0].mean(), pairs[:, 1].mean()
    assert w1[10**5] < 0.7 * w1[10**4] and w1[10**6] < 0.85 * w1[10**5], w1
    assert ks[10**5] < ks[10**4] and ks[10**6] < ks[10**5], ks
    floor = em_fit(matrix, 10**6 * (matrix @ truth), 10**6, smoothing=True).theta[:, 0]
    assert 0.8 * w1[10**6] < distances(floor, truth)[0] < w1[10**5], "the smoothing bias floor"
    # EM against EMS at n = 10⁵, seed by seed: EM's spiky MLE is further from the truth.
    n = 10**5
    for seed in range(3):
        state = draw_state(mechanism, truth, n, seed).astype(float)
        em = em_fit(matrix, state, n, smoothing=False).theta[:, 0]
        ems = em_fit(matrix, state, n, smoothing=True).theta[:, 0]
        assert distances(ems, truth)[0] < 0.9 * distances(em, truth)[0], seed


# ---------------------------------------------------------------- the estimator end to end

def test_finalize_answers_without_intervals() -> None:
    """No standard error or interval on any statistic (issue 34 item 3: the bootstrap's did
    not cover), the reason in ``extra["intervals"]`` and ``uncertainty``, a warning that points
    to hh, and no bootstrap run: the point estimate is unchanged."""
    campaign = sw_campaign(epsilon=1.0, buckets=256)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, SquareWave)
    truth = lognormal_shares(256)
    n = 100_000
    state = draw_state(mechanism, truth, n, seed=11)
    query = Query(quantiles=(0.5, 0.95), ranges=((0.1, 0.3),))
    result = ESTIMATOR.finalize(campaign, n, state, query)
    assert result.method == METHODS["ems"] and result.postprocessing.startswith("ems: ")
    assert result.extra["intervals"] == result.uncertainty == INTERVALS
    assert INTERVALS.startswith("none: ") and NO_INTERVALS_WARNING in result.warnings
    assert "(hh)" in NO_INTERVALS_WARNING
    assert result.variance_model.startswith("none")
    assert not any(key.startswith("bootstrap") for key in result.extra)
    assert result.extra["converged"] and result.extra["iterations"] > 2
    assert sum(row.value for row in result.histogram) == pytest.approx(1.0, abs=1e-12)
    statistics = [*result.histogram, *result.cdf, *result.quantiles, *result.ranges,
                  result.mean]
    assert all(row.std_error is None and row.ci_low is None and row.ci_high is None
               for row in statistics)
    # The point estimates are the fit's, read as before.
    fit = em_fit(transition_matrix(mechanism), state, n, smoothing=True,
                 weight=smoothing_weight(n), tolerance=loglik_tolerance(n)).theta[:, 0]
    assert [row.value for row in result.histogram] == fit.tolist()
    p50 = result.quantiles[0]
    assert p50.value == pytest.approx(quantile_of(true_cdf(fit), 0.5), abs=1e-12)
    assert abs(p50.value - quantile_of(true_cdf(truth), 0.5)) < 0.01
    share = result.ranges[0]
    assert 0 < share.value < 1
    # The answer and the JSON/CSV say null where there is no interval.
    body = result.to_json()
    assert body["quantiles"][0]["std_error"] is None and body["mean"]["ci_low"] is None
    assert result.to_csv().splitlines()[1].split(",")[5:8] == ["", "", ""]
    # The query's post-processing picks EM; one this estimator does not offer falls back to EMS.
    em = ESTIMATOR.finalize(campaign, n, state, Query(postprocessing="em"))
    assert em.method == METHODS["em"] and em.postprocessing.startswith("em: ")
    assert em.quantiles[0].ci_low is None


def test_a_fit_has_a_covariance_or_says_why_it_has_none() -> None:
    """The two forms of a distribution fit's uncertainty exclude each other, and one is
    required: an answer either has analytic intervals or states its reason for none."""
    mechanism = sw(epsilon=1.0, buckets=8)
    leaves = np.full(8, 1 / 8)
    with pytest.raises(ValueError, match="covariance or says why"):
        FittedDistribution(mechanism=mechanism, n=10, leaves=leaves)
    with pytest.raises(ValueError, match="covariance or says why"):
        FittedDistribution(mechanism=mechanism, n=10, leaves=leaves,
                           covariance=np.eye(8), no_intervals="none: a reason")
    fitted = ESTIMATOR.fit(mechanism, 100, np.full(8, 1, dtype=np.int64) * 12 + np.eye(
        8, dtype=np.int64)[0] * 4, "ems")
    assert fitted.covariance is None and fitted.no_intervals == INTERVALS
