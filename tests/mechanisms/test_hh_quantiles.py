"""Hierarchical histograms' quantiles and post-processing, on populations no estimator
choice was tuned on (issue 34 items 1–2; MECHANISMS-2.md §1.2, §1.5 check 8).

The quantile read (a walk down the tree) was chosen on LogNormal(ln 200 ms, 0.5) over
[1, 10⁴] ms (log grid) and [0, 1000] ms (linear), LogNormal(ln 50, 1.2), N(500, 120²) and two
bimodal mixtures. The populations here are others: a smooth N(900, 250²) on a linear grid
[0, 2000], a skewed LogNormal(ln 80, 0.8) on a log grid [0.5, 5000], a skewed Gamma(2, 150)
on a linear grid [0, 2000], and a bimodal 0.6·LogNormal(ln 20, 0.4) + 0.4·LogNormal(ln 2000, 0.5)
on a log grid [1, 10⁵]; ε = 1, D = 256 leaves, B = 4. (With equal weights p50 falls in the
empty valley, where F stays within 10⁻⁴ of 0.5 over half a decade: the quantile is then barely
defined, and its estimates' bias measured 0.60–0.66 of their standard deviation.)

Variance model: i.i.d. sampling (helpers/hhsample.py draws the merged state in bulk from the
exact distribution of the counts), so the target is the population's quantile. Each run goes
through ``finalize``, the code a query runs.

Tolerances: coverage by a two-sided binomial test of "coverage in [0.93, 0.97]" at
α = 10⁻³ over the file's tests (Bonferroni); bias by a one-sided test of "|bias| ≤ 0.5 of the
estimates' standard deviation": the runs' mean is within (0.5 + 3/√R)·sd of the truth (the
mean's own noise is sd/√R).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from chorus_collector.estimators import Query
from chorus_collector.estimators.distribution import quantile_of, tree_quantile
from chorus_collector.estimators.hierarchical import HierarchicalEstimator
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.mechanisms import HierarchicalHistogram
from helpers.hhsample import sample_state

ESTIMATOR = HierarchicalEstimator()
LEVELS = (0.5, 0.9, 0.95, 0.99)
RUNS = 200


class Mixture:
    """A two-part mixture with a cdf and a ppf (by root finding)."""

    def __init__(self, weight: float, first: object, second: object) -> None:
        self.parts = ((weight, first), (1 - weight, second))

    def cdf(self, x: float) -> float:
        return float(sum(w * d.cdf(x) for w, d in self.parts))  # type: ignore[attr-defined]

    def ppf(self, q: float) -> float:
        from scipy.optimize import brentq

        return float(brentq(lambda x: self.cdf(x) - q, 1e-9, 1e9, xtol=1e-10))


POPULATIONS = {
    "smooth-linear": ("linear", 0.0, 2000.0, stats.norm(900, 250)),
    "skewed-log": ("log", 0.5, 5000.0, stats.lognorm(0.8, scale=80)),
    "skewed-linear": ("linear", 0.0, 2000.0, stats.gamma(2, scale=150)),
    "bimodal-log": ("log", 1.0, 1e5, Mixture(0.6, stats.lognorm(0.4, scale=20),
                                             stats.lognorm(0.5, scale=2000))),
}
SIZES = (10_000, 100_000, 1_000_000)
TESTS = len(POPULATIONS) * len(SIZES) * len(LEVELS)


def hh_campaign(scale: str, lo: float, hi: float) -> Campaign:
    return campaign_from_spec({"name": "hh-quantiles", "mechanism": "hh", "epsilon": 1.0,
                               "domain": {"kind": "numeric", "lo": lo, "hi": hi},
                               "params": {"branching": 4, "buckets": 256, "scale": scale}})


def bucket_shares(mechanism: HierarchicalHistogram, population: object) -> np.ndarray:
    """Each bucket's exact share (values beyond the domain clipped into the end buckets)."""
    cdf = np.array([population.cdf(e) for e in mechanism.edges()])  # type: ignore[attr-defined]
    cdf[0], cdf[-1] = 0.0, 1.0
    return np.diff(cdf)


def assert_coverage(hits: int, runs: int, label: str, alpha: float = 1e-3 / TESTS) -> None:
    """Two-sided binomial test of "coverage in [0.93, 0.97]"."""
    assert stats.binom.cdf(hits, runs, 0.93) > alpha / 2, \
        f"{label}: {hits}/{runs} covered, below 93%"
    assert stats.binom.sf(hits - 1, runs, 0.97) > alpha / 2, \
        f"{label}: {hits}/{runs} covered, above 97%"


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("population", list(POPULATIONS))
def test_quantiles_cover_and_are_nearly_unbiased(population: str, n: int) -> None:
    """p50/p90/p95/p99: the 95% interval covers the population quantile 93–97% of the time,
    holds the estimate, and the estimate's bias is under half its standard deviation."""
    scale, lo, hi, dist = POPULATIONS[population]
    campaign = hh_campaign(scale, lo, hi)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, HierarchicalHistogram)
    leaves = bucket_shares(mechanism, dist)
    truth = [dist.ppf(q) for q in LEVELS]  # type: ignore[attr-defined]
    rng = np.random.default_rng([34, n, list(POPULATIONS).index(population)])
    query = Query(quantiles=LEVELS)
    values = np.zeros((RUNS, len(LEVELS)))
    hits = np.zeros(len(LEVELS), dtype=int)
    for run in range(RUNS):
        result = ESTIMATOR.finalize(campaign, n, sample_state(mechanism, leaves, n, rng), query)
        for i, (statistic, t) in enumerate(zip(result.quantiles, truth, strict=True)):
            assert statistic.ci_low <= statistic.value <= statistic.ci_high
            values[run, i] = statistic.value
            hits[i] += statistic.ci_low <= t <= statistic.ci_high
    for i, (q, t) in enumerate(zip(LEVELS, truth, strict=True)):
        label = f"{population}, n = {n}, p{round(100 * q)}"
        assert_coverage(int(hits[i]), RUNS, label)
        sd = values[:, i].std(ddof=1)
        bias = values[:, i].mean() - t
        assert abs(bias) <= (0.5 + 3 / math.sqrt(RUNS)) * sd, \
            f"{label}: bias {bias:.4g} against sd {sd:.4g} (true {t:.4g})"


def test_tree_walk_reads_a_monotone_cdf_like_a_plain_crossing() -> None:
    """On a monotone F̂ the walk finds the first crossing, interpolated inside the leaf."""
    rng = np.random.default_rng(1)
    for branching, height in ((2, 5), (4, 3), (5, 2)):
        leaves = rng.dirichlet(np.full(branching**height, 0.3))
        cdf = np.concatenate([[0.0], np.cumsum(leaves)])
        cdf[-1] = 1.0
        for q in (0.01, 0.3, 0.5, 0.95, 0.999):
            assert tree_quantile(cdf, q, branching) == pytest.approx(quantile_of(cdf, q),
                                                                       abs=1e-12)


def test_tree_walk_commits_to_the_node_where_the_cdf_first_reaches_q() -> None:
    """Unlike a running maximum over every edge, the walk looks only at the node boundaries
    on its way down; a CDF that never reaches q (a band's lower side) reads as the top of the
    range, even through a last leaf estimated below zero."""
    # B = 2, D = 4: F̂ at the edges 0, ¼, ½, ¾, 1. A spike at ¼ (0.7) is inside the left
    # half, whose upper edge (0.4) is below q = 0.6: the walk goes right.
    cdf = np.array([0.0, 0.7, 0.4, 0.8, 1.0])
    assert tree_quantile(cdf, 0.6, 2) == pytest.approx(0.5 + 0.25 * (0.2 / 0.4))
    assert quantile_of(np.maximum.accumulate(cdf), 0.6) < 0.25  # a running maximum stops early
    assert tree_quantile(np.array([0.0, 0.2, 0.3, 0.4, 0.5]), 0.9, 2) == 1.0
    assert tree_quantile(np.array([0.0, 0.2, 0.3, 0.5, 0.45]), 0.9, 2) == 1.0


@pytest.mark.parametrize("population", ["skewed-log", "smooth-linear"])
def test_post_processing_is_never_worse_than_the_unbiased_answer(population: str) -> None:
    """Every post-processing option hh offers improves what it changes and leaves the rest:
    over R seeded runs, Norm-Sub's histogram has a mean squared error (summed over buckets,
    against the population's shares) no larger than the unbiased histogram's, up to three
    standard errors of the paired difference; every statistic it does not post-process (as
    ``extra["postprocessed"]`` says) is exactly the unbiased answer's."""
    scale, lo, hi, dist = POPULATIONS[population]
    campaign = hh_campaign(scale, lo, hi)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, HierarchicalHistogram)
    leaves = bucket_shares(mechanism, dist)
    edges = mechanism.edges()
    query = Query(quantiles=LEVELS, ranges=((edges[0], edges[64]), (edges[100], edges[200])))
    rng = np.random.default_rng([34, 2, list(POPULATIONS).index(population)])
    options = [m for m in ESTIMATOR.postprocessing if m != "none"]
    assert options == ["norm-sub"]
    runs, n = 100, 10_000
    excess = {m: np.zeros(runs) for m in options}
    for run in range(runs):
        state = sample_state(mechanism, leaves, n, rng)
        unbiased = ESTIMATOR.finalize(campaign, n, state, query)
        base = np.array([s.value for s in unbiased.histogram]) - leaves
        for method in options:
            post = ESTIMATOR.finalize(campaign, n, state, Query(
                quantiles=query.quantiles, ranges=query.ranges, postprocessing=method))
            assert post.extra["postprocessed"] == ["histogram"]
            for name in ("cdf", "quantiles", "ranges"):
                assert getattr(post, name) == getattr(unbiased, name), (method, name)
            assert post.mean == unbiased.mean
            error = np.array([s.value for s in post.histogram]) - leaves
            excess[method][run] = float(error @ error - base @ base)
    for method, diff in excess.items():
        bound = 3 * diff.std(ddof=1) / math.sqrt(runs)
        assert diff.mean() <= bound, f"{method}: histogram MSE up by {diff.mean():.3g}"
