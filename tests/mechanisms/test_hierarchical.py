"""Hierarchical histograms: map, the consistent fit and its covariance, against exact theory
(MECHANISMS-2.md §1.2, §1.5 checks 5–8, errata §8.1–8.3).

Variance model: i.i.d. sampling. Every statistical repetition draws a fresh sample of n users
from a known population (a log-normal on a log grid, like latencies): each user's level
uniformly and its value from the population, independently, so the level partition is redrawn
every run and the sampling term of level sampling is in the variance (§6 item 3). The
simulation draws the merged state in bulk from the exact distribution of the counts (per
level: the true node counts are multinomial; k-RR reports are multinomial per true node, OUE
support counts binomial per node: the bits are independent given the value); a test checks
that sampler against exact theory, and another runs the real client randomizer end to end.

Tolerances: z-tests at α = 1e-6 with Bonferroni over the ranges; χ²_{R−1} bands for variances
(Wilson–Hilferty); binomial tests for coverage. The stage-1 fit (weights from the n_ℓ only) is
exactly linear, so its mean and variance are exact; the final (feasible GLS) fit's bias is
O(1/n), under 0.1 standard errors in the settings below, far under what R runs can detect.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from chorus_collector.estimators import Query
from chorus_collector.estimators import hierarchical as hh
from chorus_collector.estimators.hierarchical import (
    HierarchicalEstimator,
    LevelEstimate,
    TreeFit,
    consistent_fit,
    level_covariance,
    level_estimates,
    reference_variance,
    tree_covariance,
    tree_least_squares,
    tree_operator,
)
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.domain import Categories
from chorus_shared.mechanisms import KRR, OUE, HierarchicalHistogram
from chorus_shared.mechanisms.pure import PureOracle
from helpers.examples import example_campaigns
from helpers.hhsample import level_shares, sample_state
from helpers.support import chi2_band, z_threshold

ESTIMATOR = HierarchicalEstimator()
ALPHA = 1e-6


# ---- helpers: populations, the bulk sampler, dense references ---------------------------------

def hh_campaign(epsilon: float, branching: int, buckets: int, scale: str = "log",
                lo: float = 1.0, hi: float = 10_000.0) -> Campaign:
    return campaign_from_spec({"name": "hh-test", "mechanism": "hh", "epsilon": epsilon,
                               "domain": {"kind": "numeric", "lo": lo, "hi": hi},
                               "params": {"branching": branching, "buckets": buckets,
                                          "scale": scale}})


def mechanism_of(campaign: Campaign) -> HierarchicalHistogram:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, HierarchicalHistogram)
    return mechanism


def lognormal_leaves(mechanism: HierarchicalHistogram, median: float, sigma: float
                     ) -> np.ndarray:
    """Each bucket's exact share of a log-normal (values beyond the domain clipped into the
    end buckets, as the client clips them)."""
    cdf = np.array([NormalDist().cdf(math.log(e / median) / sigma)
                    for e in mechanism.edges()])
    cdf[0], cdf[-1] = 0.0, 1.0
    return np.diff(cdf)


def lognormal_quantile(median: float, sigma: float, q: float) -> float:
    return median * math.exp(sigma * NormalDist().inv_cdf(q))


def design(branching: int, height: int) -> np.ndarray:
    """A: (nodes of levels 1 … h, leaves), node = sum of its leaves."""
    leaves = branching**height
    rows = []
    for level in range(1, height + 1):
        size = branching**(height - level)
        for j in range(branching**level):
            row = np.zeros(leaves)
            row[j * size:(j + 1) * size] = 1.0
            rows.append(row)
    return np.array(rows)


def constrained_lstsq(a: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """argmin Σ w (Ax − z)² subject to Σx = 1, by np.linalg.lstsq on x = 1/D + Kt, K an
    orthonormal basis of {Σx = 0} (so the minimum-norm t is the minimum-norm x)."""
    leaves = a.shape[1]
    basis, _ = np.linalg.qr(np.column_stack([np.ones(leaves), np.eye(leaves)[:, :-1]]))
    k = basis[:, 1:]
    x0 = np.full(leaves, 1.0 / leaves)
    root = np.sqrt(w)
    t = np.linalg.lstsq(root[:, None] * (a @ k), root * (z - a @ x0), rcond=None)[0]
    result: np.ndarray = x0 + k @ t
    return result


def dense_operator(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """P of the constrained weighted least squares, from its KKT system."""
    leaves = a.shape[1]
    kkt = np.zeros((leaves + 1, leaves + 1))
    kkt[:leaves, :leaves] = a.T @ (w[:, None] * a)
    kkt[:leaves, leaves] = kkt[leaves, :leaves] = 1.0
    rhs = np.vstack([a.T * w, np.zeros((1, a.shape[0]))])
    operator: np.ndarray = np.linalg.solve(kkt, rhs)[:leaves]
    return operator


def hay_two_pass(levels: Sequence[np.ndarray], branching: int) -> np.ndarray:
    """Hay et al.'s two passes as MECHANISMS-2.md §1.2 writes them (node height i: leaves 1,
    the root h + 1), with x̄_root = 1 set before the top-down pass (erratum §8.1)."""
    b, height = branching, len(levels)
    smoothed: dict[int, np.ndarray] = {height: levels[height - 1]}
    for level in range(height - 1, 0, -1):
        i = height - level + 1
        children = smoothed[level + 1].reshape(-1, b).sum(axis=1)
        smoothed[level] = ((b**i - b**(i - 1)) / (b**i - 1)) * levels[level - 1] + \
            ((b**(i - 1) - 1) / (b**i - 1)) * children
    parent = np.ones(1)
    for level in range(1, height + 1):
        siblings = smoothed[level].reshape(-1, b)
        parent = (siblings + (parent[:, None] - siblings.sum(axis=1, keepdims=True)) / b).ravel()
    return parent


def split(z: np.ndarray, branching: int, height: int) -> list[np.ndarray]:
    return np.split(z, np.cumsum([branching**level for level in range(1, height)]))


@functools.cache  # the many-run tests ask for the same ranges every run
def canonical_nodes(a: int, b: int, branching: int, height: int) -> tuple[tuple[int, int], ...]:
    """The fewest tree nodes (level, index) whose leaves make up [a, b) (§1.2)."""
    out: list[tuple[int, int]] = []

    def visit(level: int, j: int) -> None:
        size = branching**(height - level)
        start, end = j * size, (j + 1) * size
        if end <= a or start >= b:
            return
        if a <= start and end <= b and level > 0:
            out.append((level, j))
            return
        for child in range(branching):
            visit(level + 1, j * branching + child)

    visit(0, 0)
    return tuple(out)


def range_rows(buckets: int, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    rows = np.zeros((len(ranges), buckets))
    for i, (a, b) in enumerate(ranges):
        rows[i, a:b] = 1.0
    return rows


def true_fit_parts(mechanism: HierarchicalHistogram, leaves: np.ndarray
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each level's exact (v, u) for the population."""
    parts = [level_covariance(mechanism.oracles[level - 1],
                              level_shares(mechanism, leaves, level))
             for level in range(1, mechanism.height + 1)]
    return [p[0] for p in parts], [p[1] for p in parts]


def binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X ≥ k) (upper) or P(X ≤ k) for X ~ Binomial(n, p)."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p) for i in terms]
    top = max(logs)
    return math.exp(top) * sum(math.exp(x - top) for x in logs)


def assert_coverage(hits: int, runs: int, low: float, high: float, alpha: float,
                    label: str) -> None:
    """Two-sided binomial test of "coverage in [low, high]"."""
    assert binomial_tail(hits, runs, low, upper=False) > alpha / 2 or hits >= low * runs, \
        f"{label}: {hits}/{runs} covered, below {low:.0%}"
    assert binomial_tail(hits, runs, high, upper=True) > alpha / 2 or hits <= high * runs, \
        f"{label}: {hits}/{runs} covered, above {high:.0%}"


# ---- map --------------------------------------------------------------------------------------

def reference_state(mechanism: HierarchicalHistogram, payloads: Sequence[dict[str, Any]]
                    ) -> np.ndarray:
    """The state counted one report at a time from the oracles' own ``support``."""
    state = np.zeros(ESTIMATOR.state_size(mechanism), dtype=np.int64)
    starts = np.cumsum([0] + [1 + mechanism.nodes(level)
                              for level in range(1, mechanism.height)])
    for payload in payloads:
        level = payload["level"]
        start = int(starts[level - 1])
        state[start] += 1
        for node in mechanism.oracles[level - 1].support(mechanism.sub_payload(payload)):
            state[start + 1 + node] += 1
    return state


MAP_CAMPAIGNS = [c for c in example_campaigns() if c.mechanism.name == "hh"] + \
    [hh_campaign(1.0, 4, 256), hh_campaign(4.0, 2, 64)]


@pytest.mark.parametrize("campaign", MAP_CAMPAIGNS,
                         ids=[f"{c.name}-{i}" for i, c in enumerate(MAP_CAMPAIGNS)])
def test_map_counts_reports_and_support_per_level(campaign: Campaign,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism = mechanism_of(campaign)
    kinds = {o.name for o in mechanism.oracles}
    rng = random.Random(3)
    payloads = [mechanism.randomize(rng.random(), rng) for _ in range(3000)]
    expected = reference_state(mechanism, payloads)
    assert (ESTIMATOR.map(mechanism, payloads) == expected).all()
    # The OUE levels unpacked a few rows at a time give the same counts.
    monkeypatch.setattr(hh, "_UNPACK_CELLS", 7 * mechanism.buckets)
    assert (ESTIMATOR.map(mechanism, payloads) == expected).all()
    assert (ESTIMATOR.map(mechanism, []) == 0).all()
    halves = ESTIMATOR.map(mechanism, payloads[:1000]) + ESTIMATOR.map(mechanism, payloads[1000:])
    assert (halves == expected).all()  # the state is additive
    assert kinds <= {"krr", "oue"}


def test_map_campaigns_cover_both_level_oracles() -> None:
    kinds = [{o.name for o in mechanism_of(c).oracles} for c in MAP_CAMPAIGNS]
    assert {"krr", "oue"} in kinds


# ---- the level covariance ---------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "epsilon", "d"),
                         [("krr", 1.0, 4), ("krr", 3.0, 5), ("oue", 1.0, 4), ("oue", 0.5, 6)])
def test_level_covariance_equals_exact_enumeration(kind: str, epsilon: float, d: int) -> None:
    domain = Categories(values=tuple(str(j) for j in range(d)))
    oracle: PureOracle = KRR(domain=domain, epsilon=epsilon) if kind == "krr" else \
        OUE(domain=domain, epsilon=epsilon)
    p, q = oracle.support_probabilities()
    f = np.random.default_rng(d).dirichlet(np.ones(d))
    mean, second = np.zeros(d), np.zeros((d, d))
    for output in oracle.outputs():
        y = np.zeros(d)
        y[list(oracle.support(output))] = 1.0
        y = (y - q) / (p - q)
        prob = sum(f[x] * oracle.output_probability(output, x) for x in range(d))
        mean += prob * y
        second += prob * np.outer(y, y)
    exact = second - np.outer(mean, mean)
    v, u = level_covariance(oracle, f)
    assert np.allclose(mean, f, atol=1e-12)  # Y is unbiased for f
    assert np.allclose(np.diag(v) - np.outer(u, u), exact, atol=1e-12)
    if kind == "krr":
        assert np.allclose(exact.sum(axis=1), 0.0, atol=1e-12)  # the estimates sum to 1
    # At a uniform f, Cov(Y) acts on {Σd = 0} as s·I.
    uniform = np.full(d, 1.0 / d)
    v, u = level_covariance(oracle, uniform)
    contrast = np.eye(d)[0] - np.eye(d)[1]
    covariance = np.diag(v) - np.outer(u, u)
    assert contrast @ covariance @ contrast == pytest.approx(2 * reference_variance(oracle))


# ---- consistency ------------------------------------------------------------------------------

SHAPES = [(2, 3), (4, 3), (3, 2), (2, 6), (4, 4)]


@pytest.mark.parametrize(("branching", "height"), SHAPES)
def test_equal_weights_give_hay_two_pass_and_the_constrained_least_squares(
        branching: int, height: int) -> None:
    a = design(branching, height)
    z = np.random.default_rng(branching * 10 + height).normal(0.0, 0.3, a.shape[0])
    levels = split(z, branching, height)
    nodes = tree_least_squares(levels, [1.0] * height, branching)
    assert np.abs(nodes[-1] - hay_two_pass(levels, branching)).max() < 1e-10
    assert np.abs(nodes[-1] - constrained_lstsq(a, z, np.ones(len(z)))).max() < 1e-10


@pytest.mark.parametrize(("branching", "height"), SHAPES)
@pytest.mark.parametrize("weighting", ["per level", "per node"])
def test_weighted_fit_is_the_constrained_least_squares_and_a_consistent_projection(
        branching: int, height: int, weighting: str) -> None:
    rng = np.random.default_rng(7 * branching + height)
    a = design(branching, height)
    z = rng.normal(0.0, 0.3, a.shape[0])
    sizes = [branching**level for level in range(1, height + 1)]
    weights = [np.full(s, rng.uniform(0.2, 5.0)) if weighting == "per level" else
               rng.uniform(0.2, 5.0, s) for s in sizes]
    nodes = tree_least_squares(split(z, branching, height), weights, branching)
    assert np.abs(nodes[-1] - constrained_lstsq(a, z, np.concatenate(weights))).max() < 1e-10
    # Every parent is the sum of its children, and the level-1 nodes sum to the root, 1.
    assert abs(nodes[0].sum() - 1.0) < 1e-12
    assert abs(math.fsum(nodes[-1].tolist()) - 1.0) < 1e-12
    for parent, children in itertools.pairwise(nodes):
        assert np.abs(children.reshape(-1, branching).sum(axis=1) - parent).max() < 1e-12
    # A projection: fitting the consistent tree again changes nothing.
    again = tree_least_squares(nodes, weights, branching)
    for before, after in zip(nodes, again, strict=True):
        assert np.abs(before - after).max() < 1e-12
    # Linear: x̂ = Pz + c, with P from the unit responses.
    transposed, constant = tree_operator(weights, branching)
    assert np.abs(transposed.T @ z + constant - nodes[-1]).max() < 1e-12



def test_the_tree_passes_sum_children_exactly_as_numpy_does() -> None:
    """``_sum_children`` replaces ``sum(axis=-1)`` in the tree passes for speed: the same
    numbers bit for bit, for every branching factor a campaign may declare (2–16) and for one
    vector or a batch, so no fit changes."""
    rng = np.random.default_rng(11)
    for branching in range(2, 17):
        for batch, nodes in ((1, 1), (1, 64), (3, 5), (300, 16)):
            grouped = rng.normal(size=(batch, nodes, branching)) * rng.uniform(
                1e-3, 1e3, size=(batch, nodes, branching))
            assert hh._sum_children(grouped).tobytes() == grouped.sum(axis=-1).tobytes()


@pytest.mark.parametrize("empty", ["middle", "leaves"])
def test_a_level_with_no_weight_carries_no_information(empty: str) -> None:
    branching, height = 3, 3
    a = design(branching, height)
    z = np.random.default_rng(5).normal(0.0, 0.3, a.shape[0])
    zero = 1 if empty == "middle" else height - 1
    weights = [np.full(branching**level, 0.0 if level - 1 == zero else 1.0)
               for level in range(1, height + 1)]
    leaves = tree_least_squares(split(z, branching, height), weights, branching)[-1]
    # The constrained least squares without that level; with no leaf level, the leaves are
    # not identified and the minimum-norm solution splits each parent equally.
    assert np.abs(leaves - constrained_lstsq(a, z, np.concatenate(weights))).max() < 1e-10
    if empty == "leaves":
        assert np.allclose(leaves.reshape(-1, branching), leaves.reshape(-1, branching)[:, :1])


def test_the_fitted_covariance_is_the_dense_sandwich(monkeypatch: pytest.MonkeyPatch) -> None:
    """P and PΣPᵀ from the tree passes equal a dense KKT solve with an explicit Σ."""
    mechanism = mechanism_of(hh_campaign(3.0, 4, 64))
    leaves = lognormal_leaves(mechanism, 100.0, 1.0)
    state = sample_state(mechanism, leaves, 20_000, np.random.default_rng(1))
    monkeypatch.setattr(hh, "_OPERATOR_CELLS", 500)  # several chunks of unit vectors
    fitted = ESTIMATOR.fit(mechanism, 20_000, state, "none")
    assert fitted.covariance is not None
    estimates = level_estimates(mechanism, state)
    fit = consistent_fit(estimates, mechanism.branching)
    a = design(mechanism.branching, mechanism.height)
    w = np.concatenate(fit.weights)
    operator = dense_operator(a, w)
    z = np.concatenate([e.z for e in estimates])
    constant = constrained_lstsq(a, np.zeros_like(z), w)
    assert np.abs(operator @ z + constant - fitted.leaves).max() < 1e-10
    sigma = np.zeros((len(z), len(z)))
    start = 0
    for v, u, e in zip(fit.v, fit.u, estimates, strict=True):
        stop = start + len(v)
        sigma[start:stop, start:stop] = (np.diag(v) - np.outer(u, u)) / e.reports
        start = stop
    dense = operator @ sigma @ operator.T
    assert np.abs(fitted.covariance - dense).max() < 1e-10 * np.abs(dense).max()
    assert np.linalg.eigvalsh(fitted.covariance).min() > -1e-12
    # Σx = 1 exactly: the covariance of the total is 0.
    assert abs(fitted.covariance.sum()) < 1e-12


def test_fit_works_with_an_empty_level() -> None:
    mechanism = mechanism_of(hh_campaign(1.0, 4, 64))
    leaves = lognormal_leaves(mechanism, 100.0, 1.0)
    state = sample_state(mechanism, leaves, 30_000, np.random.default_rng(2))
    starts = [0, 5, 22]  # level blocks of 1 + 4, 1 + 16, 1 + 64
    for level in (2, 3):
        empty = state.copy()
        start = starts[level - 1]
        empty[start:start + 1 + mechanism.nodes(level)] = 0
        n = int(empty[starts].sum())
        fitted = ESTIMATOR.fit(mechanism, n, empty, "none")
        assert fitted.covariance is not None
        assert abs(fitted.leaves.sum() - 1.0) < 1e-12
        assert np.isfinite(fitted.covariance).all()
        assert np.linalg.eigvalsh(fitted.covariance).min() > -1e-12
        assert any(f"[{level}]" in w for w in fitted.warnings)
        # The level's counts, had there been any, are ignored.
        garbage = empty.copy()
        garbage[start + 1:start + 1 + mechanism.nodes(level)] = 999
        assert np.array_equal(ESTIMATOR.fit(mechanism, n, garbage, "none").leaves,
                              fitted.leaves)
        if level == mechanism.height:
            assert any("split equally" in w for w in fitted.warnings)
            parents = fitted.leaves.reshape(-1, mechanism.branching)
            assert np.allclose(parents, parents[:, :1])
        else:
            # Level 2 missing: the leaves still identify every node.
            assert fitted.covariance.diagonal().min() > 0
        result = ESTIMATOR.finalize(hh_campaign(1.0, 4, 64), n, empty, Query(ranges=((1, 50),)))
        assert math.isfinite(result.ranges[0].std_error)


# ---- the sampler, and the real randomizer, against exact theory -------------------------------

def test_bulk_sampler_and_real_randomizer_match_the_exact_count_distribution() -> None:
    """Per node, c_j/n_ℓ has mean λ_j and variance λ_j(1 − λ_j)/n_ℓ under i.i.d. sampling
    (a k-RR level's counts are multinomial, an OUE level's binomial per node)."""
    campaign = hh_campaign(2.0, 4, 64)
    mechanism = mechanism_of(campaign)
    assert {o.name for o in mechanism.oracles} == {"krr", "oue"}
    leaves = lognormal_leaves(mechanism, 100.0, 1.2)
    rates = []
    for level in range(1, mechanism.height + 1):
        p, q = mechanism.oracles[level - 1].support_probabilities()
        rates.append(q + (p - q) * level_shares(mechanism, leaves, level))
    rate = np.concatenate(rates)
    starts = np.cumsum([0] + [1 + mechanism.nodes(level) for level in range(1, 3)])
    nodes = np.setdiff1d(np.arange(len(rate) + 3), starts)
    level_of = np.repeat(starts, [mechanism.nodes(level) for level in range(1, 4)])

    runs, n = 400, 6000
    rng = np.random.default_rng(4)
    shares, variances = [], []
    for _ in range(runs):
        state = sample_state(mechanism, leaves, n, rng)
        assert state[starts].sum() == n
        reports = state[level_of]
        shares.append(state[nodes] / reports)
        variances.append(rate * (1 - rate) / reports)
    shares_a = np.array(shares)
    exact = np.array(variances).mean(axis=0)
    z = (shares_a.mean(axis=0) - rate) / np.sqrt(exact / runs)
    assert np.abs(z).max() < z_threshold(ALPHA, len(rate))
    low, high = chi2_band(runs - 1, ALPHA / len(rate))
    ratio = shares_a.var(axis=0, ddof=1) / exact
    assert ((ratio > low) & (ratio < high)).all(), np.round(ratio, 3)

    # The client's randomizer, through map: one run of 30,000 reports.
    values = np.exp(np.random.default_rng(6).normal(math.log(100.0), 1.2, 30_000))
    prng = random.Random(6)
    payloads = [mechanism.randomize(mechanism.encode(float(x)), prng) for x in values]
    state = ESTIMATOR.map(mechanism, payloads)
    reports = state[level_of]
    z = (state[nodes] / reports - rate) / np.sqrt(rate * (1 - rate) / reports)
    assert np.abs(z).max() < z_threshold(ALPHA, len(rate))
    assert abs(state[starts].sum() - 30_000) == 0


def test_raw_level_estimates_have_the_iid_covariance() -> None:
    """Each level's z: unbiased, with Cov(z_ℓ) = (diag(v) − uuᵀ)·E[1/n_ℓ], checked on every
    node and every pair of neighbours (the k-RR levels' negative covariances, OUE's −f_i f_j).
    At ε = 3 on a concentrated population the sampling term f(1 − f) adds 37% to the variance
    of the largest OUE node: a fixed-population formula fails here."""
    mechanism = mechanism_of(hh_campaign(3.0, 4, 256))
    leaves = lognormal_leaves(mechanism, 100.0, 0.3)
    v, u = true_fit_parts(mechanism, leaves)
    runs, n = 2000, 30_000
    rng = np.random.default_rng(9)
    z, inverse_reports = [], []
    for _ in range(runs):
        levels = level_estimates(mechanism, sample_state(mechanism, leaves, n, rng))
        z.append(np.concatenate([e.z for e in levels]))
        inverse_reports.append([1 / e.reports for e in levels])
    values = np.array(z)
    scale = np.array(inverse_reports).mean(axis=0)
    rows, truth, variance = [], [], []
    start = 0
    for level in range(1, mechanism.height + 1):
        d = mechanism.nodes(level)
        cov = (np.diag(v[level - 1]) - np.outer(u[level - 1], u[level - 1])) * scale[level - 1]
        for j in range(d):
            for width in (1, 2):
                if j + width <= d:
                    r = np.zeros(d)
                    r[j:j + width] = 1.0
                    row = np.zeros(values.shape[1])
                    row[start:start + d] = r
                    rows.append(row)
                    truth.append(r @ level_shares(mechanism, leaves, level))
                    variance.append(r @ cov @ r)
        start += d
    stats = values @ np.array(rows).T
    tests = len(rows)
    zs = (stats.mean(axis=0) - np.array(truth)) / np.sqrt(np.array(variance) / runs)
    assert np.abs(zs).max() < z_threshold(ALPHA, tests)
    low, high = chi2_band(runs - 1, ALPHA / tests)
    ratio = stats.var(axis=0, ddof=1) / np.array(variance)
    assert ((ratio > low) & (ratio < high)).all(), (ratio.min(), ratio.max(), low, high)


# ---- unbiasedness and exact variance ----------------------------------------------------------

def _projected_variances(transposed: np.ndarray, fit: TreeFit, reports: Sequence[int],
                         rows: np.ndarray) -> np.ndarray:
    """diag(R·PΣPᵀ·Rᵀ) for Σ = blockdiag((diag(v_ℓ) − u_ℓu_ℓᵀ)/n_ℓ), P given as Pᵀ: the
    ranges' rows projected first (nodes × ranges), so no D × D covariance is formed. The same
    sum as ``tree_covariance``; exact_variances(dense=True) checks the two agree."""
    projected = transposed @ rows.T
    out = np.zeros(rows.shape[0])
    start = 0
    for v, u, count in zip(fit.v, fit.u, reports, strict=True):
        stop = start + len(v)
        if count:
            block = projected[start:stop]
            out += (v / count) @ block**2 - (u @ block) ** 2 / count
        start = stop
    return out


def exact_variances(mechanism: HierarchicalHistogram, leaves: np.ndarray,
                    reports: Sequence[int], rows: np.ndarray, ranges: Sequence[tuple[int, int]],
                    dense: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(raw, stage-1, feasible) exact range variances for these level counts: raw = the sum
    of canonical nodes (Σ_ℓ r_ℓᵀ Cov(z_ℓ) r_ℓ), the fits rᵀPΣPᵀr with the true Σ; the
    feasible fit's P at the weights the true shares give (its first-order variance).
    ``dense``: through the estimator's ``tree_covariance`` (D × D); otherwise the same sum
    with the ranges projected first (:func:`_projected_variances`), for the many-run test."""
    v, u = true_fit_parts(mechanism, leaves)
    truth = TreeFit([], [], v, u)
    reference = [n / reference_variance(o) for n, o in zip(reports, mechanism.oracles,
                                                           strict=True)]
    best = [n / var for n, var in zip(reports, v, strict=True)]
    operators = [tree_operator(w, mechanism.branching)[0] for w in (reference, best)]
    if dense:
        fits = [np.diag(rows @ tree_covariance(t, truth, reports) @ rows.T) for t in operators]
    else:
        fits = [_projected_variances(t, truth, reports, rows) for t in operators]
    raw = []
    for terms in _raw_terms(mechanism, leaves, tuple(ranges)):
        total = 0.0
        for level in range(1, mechanism.height + 1):
            total += terms[level - 1] / reports[level - 1]
        raw.append(total)
    return np.array(raw), fits[0], fits[1]


_RAW_TERMS: dict[tuple[Any, ...], list[list[np.float64]]] = {}


def _raw_terms(mechanism: HierarchicalHistogram, leaves: np.ndarray,
               ranges: tuple[tuple[int, int], ...]) -> list[list[np.float64]]:
    """Per range, per level: r_ℓᵀ Cov(Y_ℓ) r_ℓ, r_ℓ the indicator of the range's canonical
    nodes on level ℓ; a raw range's variance is Σ_ℓ of these over n_ℓ. They depend on the
    population only, so the many-run test computes them once instead of every run (the same
    products, divided by each run's n_ℓ as before: the same numbers)."""
    key = (mechanism, leaves.tobytes(), ranges)
    if key not in _RAW_TERMS:
        v, u = true_fit_parts(mechanism, leaves)
        out = []
        for a, b in ranges:
            terms = []
            for level in range(1, mechanism.height + 1):
                r = np.zeros(mechanism.nodes(level))
                for at, j in canonical_nodes(a, b, mechanism.branching, mechanism.height):
                    if at == level:
                        r[j] = 1.0
                cov = np.diag(v[level - 1]) - np.outer(u[level - 1], u[level - 1])
                terms.append(r @ cov @ r)
            out.append(terms)
        _RAW_TERMS[key] = out
    return _RAW_TERMS[key]


RANGES = [(0, 128), (64, 192), (100, 140), (0, 37), (200, 256), (120, 124), (128, 129),
          (13, 250), (128, 132)]
SETTINGS = [
    # ε, B, D, n, population (median, σ), runs. ε = 1: k-RR on level 1, OUE below;
    # ε = 3: k-RR on levels 1–2, and the OUE node [128, 132) of level 3 holds 18% of a
    # concentrated population, so the sampling term f(1 − f) is +70% on its raw variance (a
    # fixed-population formula fails there); ε = 5, B = 2: k-RR everywhere, where the
    # feasible weights matter most (and their O(1/n) bias would show first).
    (1.0, 4, 256, 100_000, (100.0, 1.0), 300),
    (3.0, 4, 256, 30_000, (100.0, 0.3), 300),
    (5.0, 2, 256, 10_000, (100.0, 0.3), 300),
]


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "branching", "buckets", "n", "population", "runs"),
                         SETTINGS)
def test_ranges_are_unbiased_with_the_exact_variance(
        epsilon: float, branching: int, buckets: int, n: int, population: tuple[float, float],
        runs: int) -> None:
    """MECHANISMS-2.md §1.5 checks 6–7: raw ranges (canonical nodes), the exactly linear
    stage-1 fit and the final fit: z-test of the mean and χ² band of the variance against
    rᵀPΣPᵀr (averaged over the runs' level counts)."""
    mechanism = mechanism_of(hh_campaign(epsilon, branching, buckets))
    leaves = lognormal_leaves(mechanism, *population)
    rows = range_rows(buckets, RANGES)
    truth = rows @ leaves
    rng = np.random.default_rng(int(10 * epsilon) + branching)
    starts = np.cumsum([0] + [1 + mechanism.nodes(level)
                              for level in range(1, mechanism.height)])
    estimates: dict[str, list[np.ndarray]] = {"raw": [], "stage 1": [], "final": []}
    exact: dict[str, list[np.ndarray]] = {"raw": [], "stage 1": [], "final": []}
    for run in range(runs):
        state = sample_state(mechanism, leaves, n, rng)
        levels = level_estimates(mechanism, state)
        raw = [sum(levels[at - 1].z[j] for at, j in canonical_nodes(a, b, branching,
                                                                    mechanism.height))
               for a, b in RANGES]
        estimates["raw"].append(np.array(raw))
        estimates["stage 1"].append(rows @ consistent_fit(levels, branching,
                                                          feasible=False).nodes[-1])
        fitted = ESTIMATOR.fit(mechanism, n, state, "none", uncertainty=False)
        estimates["final"].append(rows @ fitted.leaves)
        reports = [int(state[s]) for s in starts]
        variances = exact_variances(mechanism, leaves, reports, rows, RANGES, dense=False)
        if run == 0:  # the projected sum is the estimator's own D × D covariance, projected
            for fast, dense in zip(variances, exact_variances(mechanism, leaves, reports, rows,
                                                              RANGES), strict=True):
                assert np.allclose(fast, dense, rtol=1e-10, atol=0), (fast, dense)
        for key, value in zip(exact, variances, strict=True):
            exact[key].append(value)
    tests = 3 * len(RANGES)
    low, high = chi2_band(runs - 1, ALPHA / tests)
    for key in estimates:
        values = np.array(estimates[key])
        variance = np.array(exact[key]).mean(axis=0)
        z = (values.mean(axis=0) - truth) / np.sqrt(variance / runs)
        assert np.abs(z).max() < z_threshold(ALPHA, tests), f"{key}: bias z = {np.round(z, 2)}"
        ratio = values.var(axis=0, ddof=1) / variance
        assert ((ratio > low) & (ratio < high)).all(), \
            f"{key}: variance ratio {np.round(ratio, 3)} outside [{low:.3f}, {high:.3f}]"
    # Consistency pays: every range but the single-node ones is estimated better than raw.
    gain = np.array(exact["final"]).mean(axis=0) / np.array(exact["raw"]).mean(axis=0)
    assert (gain < 1.0 + 1e-9).all()


def test_feasible_weights_approach_the_dense_gls_and_beat_the_reference() -> None:
    """At ε = 5 on a concentrated population the within-level variances differ a lot: the
    per-node weights at the true shares match the dense GLS with the full (singular) k-RR
    covariance, where the stage-1 weights lose much (MECHANISMS-2.md §8.3)."""
    mechanism = mechanism_of(hh_campaign(5.0, 4, 64))
    assert {o.name for o in mechanism.oracles} == {"krr"}
    leaves = lognormal_leaves(mechanism, 100.0, 0.3)
    reports = [10_000] * mechanism.height
    rows = range_rows(64, [(0, 32), (16, 48), (25, 35), (30, 31)])
    _, stage_1, feasible = exact_variances(mechanism, leaves, reports, rows,
                                           [(0, 32), (16, 48), (25, 35), (30, 31)])
    # Dense GLS: for a k-RR level, n(p − q)²·diag(1/λ) is a generalised inverse of its
    # covariance; on Σx = 1 it is the GLS weight matrix.
    a = design(mechanism.branching, mechanism.height)
    v, u = true_fit_parts(mechanism, leaves)
    gls_w = np.concatenate([n / vv for n, vv in zip(reports, v, strict=True)])
    sigma_blocks = [(np.diag(vv) - np.outer(uu, uu)) / n for vv, uu, n in
                    zip(v, u, reports, strict=True)]
    sigma = np.zeros((a.shape[0], a.shape[0]))
    start = 0
    for block in sigma_blocks:
        stop = start + len(block)
        sigma[start:stop, start:stop] = block
        start = stop
    # The GLS variance is the constrained inverse of AᵀWA, independently of P.
    m = a.T @ (gls_w[:, None] * a)
    inverse = np.linalg.pinv(m)
    ones = np.ones(64)
    gls = inverse - np.outer(inverse @ ones, inverse @ ones) / (ones @ inverse @ ones)
    assert np.allclose(np.diag(rows @ gls @ rows.T), feasible, rtol=1e-8)
    operator = dense_operator(a, gls_w)
    assert np.allclose(np.diag(rows @ operator @ sigma @ operator.T @ rows.T), feasible,
                       rtol=1e-8)
    assert (stage_1 >= feasible * (1 - 1e-9)).all() and (stage_1 / feasible).max() > 1.3


# ---- coverage ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_intervals_of_ranges_and_quantiles_cover() -> None:
    """MECHANISMS-2.md §1.5 check 8: over R runs through ``finalize``, each range's 95%
    interval covers its true share in a fraction consistent with 95% and the p50/p95
    intervals (the inverted CDF band) cover the true quantile 93–97% of the time."""
    campaign = hh_campaign(1.0, 4, 256)
    mechanism = mechanism_of(campaign)
    median, sigma, n, runs = 100.0, 1.0, 100_000, 800
    leaves = lognormal_leaves(mechanism, median, sigma)
    edges = mechanism.edges()
    ranges = [(0, 128), (64, 192), (100, 140), (0, 37), (120, 128)]
    truth = range_rows(256, ranges) @ leaves
    levels = (0.5, 0.95)
    true_quantiles = [lognormal_quantile(median, sigma, q) for q in levels]
    query = Query(ranges=tuple((edges[a], edges[b]) for a, b in ranges), quantiles=levels)
    rng = np.random.default_rng(12)
    range_hits = np.zeros(len(ranges), dtype=int)
    quantile_hits = np.zeros(len(levels), dtype=int)
    for _ in range(runs):
        result = ESTIMATOR.finalize(campaign, n, sample_state(mechanism, leaves, n, rng), query)
        range_hits += [s.ci_low <= t <= s.ci_high for s, t in zip(result.ranges, truth,
                                                                   strict=True)]
        quantile_hits += [s.ci_low <= t <= s.ci_high for s, t in zip(result.quantiles,
                                                                      true_quantiles,
                                                                      strict=True)]
    tests = len(ranges) + len(levels)
    for hits, (a, b) in zip(range_hits, ranges, strict=True):
        assert_coverage(int(hits), runs, 0.95, 0.95, 1e-3 / tests, f"range [{a}, {b})")
    for hits, q in zip(quantile_hits, levels, strict=True):
        assert_coverage(int(hits), runs, 0.93, 0.97, 1e-3 / tests, f"p{round(100 * q)}")


# ---- end to end -------------------------------------------------------------------------------

def test_finalize_end_to_end_from_the_client_randomizer() -> None:
    campaign = [c for c in example_campaigns() if c.mechanism.name == "hh"][1]
    mechanism = mechanism_of(campaign)  # ε = 3, B = 4, 16 buckets over [1, 1000], log
    median, sigma, n = 30.0, 1.0, 40_000
    values = np.exp(np.random.default_rng(8).normal(math.log(median), sigma, n))
    rng = random.Random(8)
    payloads = [mechanism.check_payload(mechanism.randomize(mechanism.encode(float(x)), rng))
                for x in values]
    state = ESTIMATOR.map(mechanism, payloads)
    edges = mechanism.edges()
    query = Query(ranges=((edges[0], edges[8]), (edges[3], edges[12]), (5.0, 50.0)),
                  quantiles=(0.5, 0.95))
    result = ESTIMATOR.finalize(campaign, n, state, query)
    assert result.mechanism == "hh" and result.n == n and len(result.histogram) == 16
    assert result.method.startswith("hierarchical histogram (B = 4, h = 2), level sampling, "
                                    "weighted least-squares consistency with the root fixed")
    assert result.uncertainty.startswith("analytic: exact covariance of the linear consistent")
    assert result.variance_model.startswith("iid-sampling")
    assert not result.warnings
    assert math.fsum(s.value for s in result.histogram) == pytest.approx(1.0, abs=1e-12)
    # The sample's own shares, which the estimate targets up to the mechanism's noise; 5
    # standard errors (including the sampling term) each, Bonferroni-safe at α ≈ 1e-5.
    sample = np.bincount(np.minimum((np.array([mechanism.encode(float(x)) for x in values])
                                     * 16).astype(int), 15), minlength=16) / n
    for statistic, (a, b) in zip(result.ranges[:2], [(0, 8), (3, 12)], strict=True):
        assert abs(statistic.value - sample[a:b].sum()) < 5 * statistic.std_error
        assert statistic.ci_low < statistic.value < statistic.ci_high
    for statistic, q in zip(result.quantiles, (0.5, 0.95), strict=True):
        # One run: the interval's coverage is the coverage test's business; here, the
        # interval holds the estimate and the truth is within three of its half-widths.
        assert statistic.ci_low <= statistic.value <= statistic.ci_high
        half = (statistic.ci_high - statistic.ci_low) / 2
        assert abs(statistic.value - lognormal_quantile(median, sigma, q)) < 3 * half
    assert result.extra["range_alignment"] == [True, True, False]
    assert [level["oracle"] for level in result.extra["levels"]] == ["krr", "krr"]
    assert sum(level["reports"] for level in result.extra["levels"]) == n

    # Norm-Sub: non-negative shares summing to 1 in the histogram, with the unbiased
    # estimate's standard errors and intervals within [0, 1]; every other answer is the
    # unbiased one, and the answer says so.
    post = ESTIMATOR.finalize(campaign, n, state, Query(ranges=query.ranges,
                                                        quantiles=(0.5, 0.95),
                                                        postprocessing="norm-sub"))
    shares = np.array([s.value for s in post.histogram])
    assert shares.min() >= 0.0 and shares.sum() == pytest.approx(1.0, abs=1e-12)
    assert [s.std_error for s in post.histogram] == [s.std_error for s in result.histogram]
    assert all(0.0 <= s.ci_low <= s.ci_high <= 1.0 for s in post.histogram)
    for name in ("cdf", "quantiles", "ranges"):
        assert getattr(post, name) == getattr(result, name), name
    assert post.mean == result.mean
    assert post.extra["postprocessed"] == ["histogram"] and result.extra["postprocessed"] == []
    assert "Norm-Sub" in post.method and post.postprocessing.startswith("norm-sub")
    assert any("norm-sub" in w for w in post.warnings)
    # Unknown post-processing falls back to the unbiased default.
    assert ESTIMATOR.method_of(Query(postprocessing="ems")) == "none"


def test_uncertainty_can_be_skipped_and_level_counts_are_checked() -> None:
    mechanism = mechanism_of(hh_campaign(1.0, 2, 16))
    leaves = lognormal_leaves(mechanism, 100.0, 1.0)
    state = sample_state(mechanism, leaves, 5_000, np.random.default_rng(3))
    full = ESTIMATOR.fit(mechanism, 5_000, state, "none")
    bare = ESTIMATOR.fit(mechanism, 5_000, state, "none", uncertainty=False)
    assert np.array_equal(full.leaves, bare.leaves)
    assert bare.covariance is not None and not bare.covariance.any()
    assert not full.warnings
    assert any("not the 5001" in w for w in ESTIMATOR.fit(mechanism, 5_001, state,
                                                          "none").warnings)


def test_level_estimate_reads_the_state_layout() -> None:
    mechanism = mechanism_of(hh_campaign(1.0, 2, 8))
    state = np.array([10, 6, 4, 20, 1, 2, 3, 4, 30, *range(8)], dtype=np.int64)
    levels = level_estimates(mechanism, state)
    assert [e.reports for e in levels] == [10, 20, 30]
    for e, counts in zip(levels, [[6, 4], [1, 2, 3, 4], list(range(8))], strict=True):
        p, q = e.oracle.support_probabilities()
        assert np.allclose(e.z, (np.array(counts) / e.reports - q) / (p - q))
    assert isinstance(levels[0], LevelEstimate)
