"""Distribution accuracy: ``python benchmarks/distributions.py [--quick]`` (part of ``make bench``).

Issue 17 item 4 and MECHANISMS-2.md §1.5 check 9: how close Chorus's distribution answers come
to the truth, for n ∈ {10⁴, 10⁵, 10⁶} and ε ∈ {0.5, 1, 2, 4} on three shapes, next to two plain
histogram baselines on the same grid.

* Shapes (each a campaign's numeric domain and scale; metrics on the unit scale [0, 1]):
  ``lognormal``, latency-like, LogNormal(ln 200 ms, σ = 0.5) on a *linear* grid over
  [0, 1000] ms (skewed, with a tail: p50 = 0.20, p95 = 0.46, p99 = 0.64 of the range; on a log
  grid it would be a plain normal bump, which ``bimodal`` already covers); ``bimodal``,
  0.6·N(0.3, 0.06²) + 0.4·N(0.75, 0.05²) on [0, 1]; ``uniform`` on [0, 1].
* Methods: SW+EMS and SW+EM (Square Wave, 256 input and 256 output buckets), HH (B = 4,
  D = 256 leaves, the estimator's default fit: consistent and unbiased) and HH+norm-sub; and
  the baselines k-RR and dBitFlip (b = 1, Chorus's default, and b = 16) over a Categories
  domain of the same 256 bucket labels (the device reports its bucket), their unbiased
  frequencies projected onto the simplex (query post-processing ``projection``) and read as
  a histogram; and the Haar-wavelet method (HaarHRR, CKS 2019), *simulated only*
  (benchmarks/haar_sim.py), to decide whether it earns a place as a mechanism.
* Every report is simulated per user (``chorus_collector.design.simulate``, whose samplers are
  tested against each mechanism's exact output distribution), also at n = 10⁶, and folded
  by the estimator's own ``map``: nothing is simulated at the level of the folded state. (A
  multinomial draw of Square Wave's output counts from M·θ is exact only for values already
  bucketed, and the point here includes the bucketing.)
* Answers are Chorus's own: the fit, then ``estimators.distribution.answer`` (the monotone
  CDF at the D + 1 edges and ``quantile_of``), the same code a query runs; for the baselines
  the projected histogram goes through ``answer`` too.
* Metrics, against the exact empirical CDF F of the drawn values (unit scale, not bucketed):
  W1 = ∫₀¹ |F̂ − F| (exact: F̂ is linear inside each bucket, F a step function), KS =
  max |F̂ − F| over the D + 1 edges, and |q̂ − q| for p50/p95/p99 in units of the range (q the
  empirical quantile, the smallest value with F ≥ q). Means over seeds: 5 at n = 10⁴, 3 at
  10⁵, 1 at 10⁶ (the data are redrawn per seed; each mechanism gets its own report stream).
* Coverage: the 95% quantile intervals of ``estimator.finalize`` (HH: the inverted pointwise
  band of the exact covariance; SW+EMS states none, since its bootstrap's did not cover,
  docs/mechanisms/distributions.md) for p50/p95/p99 over R seeded runs at n = 10⁵, ε = 1
  on the log-normal (R = 100; 4 runs at n = 10⁴ with --quick), against the population
  quantile (the intervals are for i.i.d. sampling) and, for reference, the sample's own
  quantile. Target 0.93–0.97; at R = 100 a true 0.95 reads between 0.90 and 0.99 (binomial
  95% range, printed).
* The SW paper's published figures (Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, SIGMOD 2020,
  arXiv 1912.01051) are **not** printed: its experimental section (datasets, ε grid, metric
  values) was not available to us — only the abstract and the authors' code — and, as far as
  is known, its results are plots against ε (Beta(5, 2) and three real data sets, D = 1024),
  not tables. What is missing is those figures' values. In their place, a *reference-code*
  comparison on the setting a helper ran the authors' ``sw.py`` (vvv214/LDP_Protocols, HEAD
  59f7cf4) on: Beta(5, 2), D = m̃ = 1024, n ∈ {10⁵, 10⁶}, ε ∈ {0.5, 1, 2, 4}, 3 seeds, W1 =
  Σᵢ |F̂(i/D) − F(i/D)|/D and KS = maxᵢ |F̂(i/D) − F(i/D)| against the bucketed sample
  (``REFERENCE_CODE``: that run's numbers, not published ones). Chorus's SW+EMS/EM run here on
  the same setting with the same metric (EMS: 3 seeds at 10⁵, 1 at 10⁶; EM: at 10⁵ only, as
  there, one seed).

Writes ``bench-results/distributions.json``. Runs are independent and seeded, so they go to
``--workers`` processes (default 2) with the same numbers as one: the full run took 8 minutes
on two cores shared with other work (grid 1.5, reference 1.5, coverage 5: then still with
SW's bootstrap, 200 EMS refits a query), --quick (one setting per shape, n = 10⁴) 5 to 35
seconds. Every loop is bounded by its counts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from haar_sim import haar_leaves  # benchmarks/, beside this script
from threadpoolctl import threadpool_limits

from chorus_collector.cli.progress import progress_bar
from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.estimators.base import Query
from chorus_collector.estimators.distribution import (
    DistributionEstimator,
    FittedDistribution,
    answer,
)
from chorus_collector.results.distribution import DistributionEstimate
from chorus_shared import Campaign, NumericRange, campaign_from_spec
from chorus_shared.mechanisms import SquareWave
from chorus_shared.mechanisms.distribution import DistributionMechanism

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = 256
BRANCHING = 4
LEVELS = (0.5, 0.95, 0.99)
SIZES = (10_000, 100_000, 1_000_000)
EPSILONS = (0.5, 1.0, 2.0, 4.0)
SEEDS = {10_000: 5, 100_000: 3, 1_000_000: 1}
DBITFLIP_B = (1, 16)
CHUNK = 100_000  # users simulated and mapped at a time (bounds memory at n = 10⁶)
METRICS = ("w1", "ks", "p50", "p95", "p99")
T = TypeVar("T")


@dataclass(frozen=True)
class Shape:
    name: str
    label: str
    lo: float
    hi: float
    draw: Callable[[np.random.Generator, int], np.ndarray]
    #: The population q-quantile on the campaign's own scale.
    quantile: Callable[[float], float]


def _lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.lognormal(math.log(200.0), 0.5, size=n)


MIXTURE = ((0.6, 0.3, 0.06), (0.4, 0.75, 0.05))


def _bimodal(rng: np.random.Generator, n: int) -> np.ndarray:
    first = rng.random(n) < MIXTURE[0][0]
    return np.where(first, rng.normal(MIXTURE[0][1], MIXTURE[0][2], n),
                    rng.normal(MIXTURE[1][1], MIXTURE[1][2], n))


def _bimodal_quantile(q: float) -> float:
    """Bisection on the mixture's CDF (clipping to [0, 1] moves no quantile here: both modes
    lie 5 standard deviations inside)."""
    parts = [(w, statistics.NormalDist(m, s)) for w, m, s in MIXTURE]
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if sum(w * d.cdf(middle) for w, d in parts) < q:
            low = middle
        else:
            high = middle
    return (low + high) / 2


SHAPES = {
    "lognormal": Shape("lognormal", "latency-like LogNormal(ln 200 ms, 0.5) on a linear grid "
                       "over [0, 1000] ms", 0.0, 1000.0, _lognormal,
                       lambda q: math.exp(math.log(200.0) + 0.5 *
                                          statistics.NormalDist().inv_cdf(q))),
    "bimodal": Shape("bimodal", "0.6·N(0.3, 0.06²) + 0.4·N(0.75, 0.05²) on [0, 1]", 0.0, 1.0,
                     _bimodal, _bimodal_quantile),
    "uniform": Shape("uniform", "U(0, 1) on [0, 1]", 0.0, 1.0,
                     lambda rng, n: rng.random(n), lambda q: q),
}

#: The authors' reference code (vvv214/LDP_Protocols ``sw.py`` at 59f7cf4, EMS switched on by
#: hand for the EMS rows) run on Beta(5, 2) with D = m̃ = 1024, mean of 3 seeds: (W1, KS) by
#: (method, n, ε). Measured by a helper for issue 17 (/tmp/research/sw_paper.md §4), NOT
#: figures from the paper; expect ±20% between runs.
REFERENCE_CODE: dict[tuple[str, int, float], tuple[float, float]] = {
    ("SW+EMS", 100_000, 0.5): (0.0105, 0.0355), ("SW+EMS", 100_000, 1.0): (0.0062, 0.0231),
    ("SW+EMS", 100_000, 2.0): (0.0030, 0.0109), ("SW+EMS", 100_000, 4.0): (0.0010, 0.0043),
    ("SW+EM", 100_000, 0.5): (0.0138, 0.0611), ("SW+EM", 100_000, 1.0): (0.0090, 0.0475),
    ("SW+EM", 100_000, 2.0): (0.0054, 0.0280), ("SW+EM", 100_000, 4.0): (0.0023, 0.0132),
    ("SW+EMS", 1_000_000, 0.5): (0.0048, 0.0156), ("SW+EMS", 1_000_000, 1.0): (0.0020, 0.0077),
    ("SW+EMS", 1_000_000, 2.0): (0.0010, 0.0048), ("SW+EMS", 1_000_000, 4.0): (0.0003, 0.0016),
}
REFERENCE_BUCKETS = 1024
REFERENCE_SOURCE = ("authors' sw.py (vvv214/LDP_Protocols 59f7cf4) run by a helper, 3 seeds; "
                    "not published figures")


def _campaigns(shape: Shape, epsilon: float) -> dict[str, Campaign]:
    domain = {"kind": "numeric", "lo": shape.lo, "hi": shape.hi}
    labels = [f"b{j}" for j in range(BUCKETS)]
    specs: dict[str, dict[str, Any]] = {
        "sw": {"mechanism": "sw", "domain": domain,
               "params": {"buckets": BUCKETS, "output_buckets": BUCKETS}},
        "hh": {"mechanism": "hh", "domain": domain,
               "params": {"branching": BRANCHING, "buckets": BUCKETS}},
        "krr": {"mechanism": "krr", "domain": labels},
        **{f"dbitflip-{b}": {"mechanism": "dbitflip", "domain": labels, "params": {"b": b}}
           for b in DBITFLIP_B},
    }
    return {key: campaign_from_spec({"name": f"{shape.name}-{key}", "epsilon": epsilon,
                                     **spec}, warn=False) for key, spec in specs.items()}


def _unit(mechanism: DistributionMechanism, values: np.ndarray) -> np.ndarray:
    """``mechanism.encode`` for an array (clip to [lo, hi], map linearly to [0, 1])."""
    assert mechanism.scale == "linear"
    lo, hi = mechanism.domain.lo, mechanism.domain.hi
    unit: np.ndarray = np.clip((np.clip(values, lo, hi) - lo) / (hi - lo), 0.0, 1.0)
    return unit


def _fold(campaign: Campaign, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-user reports, simulated and mapped in chunks; the merged state."""
    mechanism = campaign.mechanism
    estimator = estimator_for(mechanism.name)
    state = np.zeros(estimator.state_size(mechanism), dtype=np.int64)
    for start in range(0, len(inputs), CHUNK):
        state += estimator.map(mechanism, simulate(mechanism, inputs[start:start + CHUNK], rng))
    return state


@dataclass(frozen=True)
class Truth:
    values: np.ndarray  # sorted, unit scale
    quantiles: np.ndarray  # empirical, at LEVELS
    at_edges: np.ndarray  # F at the D + 1 edges

    @classmethod
    def of(cls, values: np.ndarray) -> Truth:
        ordered = np.sort(values)
        n = len(ordered)
        quantiles = np.array([ordered[math.ceil(q * n) - 1] for q in LEVELS])
        edges = np.linspace(0.0, 1.0, BUCKETS + 1)
        return cls(ordered, quantiles, np.searchsorted(ordered, edges, side="right") / n)


def wasserstein(cdf: np.ndarray, values: np.ndarray) -> float:
    """∫₀¹ |F̂ − F| exactly: F̂ linear inside each bucket through its values at the D + 1
    edges, F the empirical CDF of the sorted unit-scale ``values`` (a right-continuous step
    function). Between consecutive breakpoints F is constant and F̂ linear, so each piece is
    a trapezoid, or two triangles where F̂ − F changes sign."""
    edges = np.linspace(0.0, 1.0, len(cdf) - 1 + 1)
    points = np.union1d(edges, values)
    fitted = np.interp(points, edges, cdf)
    step = np.searchsorted(values, points, side="right") / len(values)
    width = np.diff(points)
    g0, g1 = fitted[:-1] - step[:-1], fitted[1:] - step[:-1]
    a0, a1 = np.abs(g0), np.abs(g1)
    crossing = g0 * g1 < 0
    area = np.where(crossing, (g0**2 + g1**2) / np.where(crossing, 2 * (a0 + a1), 1.0),
                    (a0 + a1) / 2)
    return float(np.sum(width * area))


def _cdf_and_quantiles(estimate: DistributionEstimate, mechanism: DistributionMechanism
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Chorus's answer as the unit-scale CDF at the edges and the quantiles at LEVELS."""
    cdf = np.array([0.0, *(s.value for s in estimate.cdf)])
    quantiles = np.array([mechanism.to_unit(s.value) for s in estimate.quantiles])
    return cdf, quantiles


def score(estimate: DistributionEstimate, mechanism: DistributionMechanism, truth: Truth
          ) -> dict[str, float]:
    cdf, quantiles = _cdf_and_quantiles(estimate, mechanism)
    errors = np.abs(quantiles - truth.quantiles)
    return {"w1": wasserstein(cdf, truth.values),
            "ks": float(np.max(np.abs(cdf - truth.at_edges))),
            "p50": float(errors[0]), "p95": float(errors[1]), "p99": float(errors[2])}


QUERY = Query(quantiles=LEVELS)


def _distribution_rows(campaign: Campaign, n: int, state: np.ndarray,
                       methods: dict[str, str]) -> dict[str, DistributionEstimate]:
    """{row: Chorus's answer} for each fit method of a distribution estimator (θ̂ only)."""
    estimator = estimator_for(campaign.mechanism.name)
    assert isinstance(estimator, DistributionEstimator)
    out = {}
    for row, method in methods.items():
        fitted = estimator.fit(campaign.mechanism, n, state, method, uncertainty=False)
        out[row] = answer(campaign, fitted, QUERY, postprocessing=method)
    return out


def _histogram_row(campaign: Campaign, grid: Campaign, n: int, state: np.ndarray
                   ) -> DistributionEstimate:
    """A categorical oracle over the bucket labels, projected onto the simplex, answered on
    the distribution campaign ``grid``'s buckets."""
    estimate = estimator_for(campaign.mechanism.name).finalize(
        campaign, n, state, Query(postprocessing="projection"))
    leaves = np.array([row.frequency for row in estimate.rows])  # type: ignore[union-attr]
    assert isinstance(grid.mechanism, DistributionMechanism)
    fitted = FittedDistribution(mechanism=grid.mechanism, n=n, leaves=leaves,
                                covariance=np.zeros((BUCKETS, BUCKETS)),
                                method=f"{campaign.mechanism.name} histogram, projected")
    return answer(grid, fitted, QUERY, postprocessing="projection")


def hh_methods() -> dict[str, str]:
    """Rows for the hierarchical estimator: its default fit (consistent, unbiased) and
    norm-sub, where it offers that."""
    estimator = estimator_for("hh")
    rows = {"HH": estimator.default_postprocessing}
    if "norm-sub" in estimator.postprocessing:
        rows["HH+norm-sub"] = "norm-sub"
    return rows


SW_METHODS = {"SW+EMS": "ems", "SW+EM": "em"}


def run_setting(shape_name: str, n: int, epsilon: float, seed: int, rows: set[str]
                ) -> dict[str, dict[str, float]]:
    """One data draw and every method's scores on it."""
    shape = SHAPES[shape_name]
    campaigns = _campaigns(shape, epsilon)
    grid = campaigns["sw"]
    mechanism = grid.mechanism
    assert isinstance(mechanism, DistributionMechanism)
    data_rng = np.random.default_rng([n, seed, list(SHAPES).index(shape.name)])
    unit = _unit(mechanism, shape.draw(data_rng, n))
    truth = Truth.of(unit)
    buckets = np.minimum((unit * BUCKETS).astype(np.int64), BUCKETS - 1)
    scores: dict[str, dict[str, float]] = {}

    def stream(key: str) -> np.random.Generator:
        return np.random.default_rng([seed, n, round(epsilon * 100), list(campaigns).index(key),
                                      list(SHAPES).index(shape.name), 7])

    answers: dict[str, DistributionEstimate] = {}
    sw_rows = {r: m for r, m in SW_METHODS.items() if r in rows}
    if sw_rows:
        answers |= _distribution_rows(grid, n, _fold(grid, unit, stream("sw")), sw_rows)
    hh_rows = {r: m for r, m in hh_methods().items() if r in rows}
    if hh_rows:
        answers |= _distribution_rows(campaigns["hh"], n,
                                      _fold(campaigns["hh"], unit, stream("hh")), hh_rows)
    for key, row in [("krr", "k-RR"), *((f"dbitflip-{b}", f"dBitFlip b={b}")
                                         for b in DBITFLIP_B)]:
        if row in rows:
            answers[row] = _histogram_row(campaigns[key], grid, n,
                                          _fold(campaigns[key], buckets, stream(key)))
    if HAAR in rows:  # simulated only (benchmarks/haar_sim.py): is it worth a mechanism?
        haar_rng = np.random.default_rng([seed, n, round(epsilon * 100), 99,
                                          list(SHAPES).index(shape.name), 7])
        leaves = haar_leaves(unit, BUCKETS, epsilon, haar_rng)
        fitted = FittedDistribution(mechanism=mechanism, n=n, leaves=leaves,
                                    covariance=np.zeros((BUCKETS, BUCKETS)),
                                    method="Haar wavelet (HaarHRR), simulated")
        answers[HAAR] = answer(grid, fitted, QUERY, postprocessing="none")
    for row, estimate in answers.items():
        scores[row] = score(estimate, mechanism, truth)
    return scores


#: The Haar-wavelet method (CKS 2019), simulated to decide whether it earns a mechanism.
HAAR = "Haar (sim.)"


def all_rows() -> list[str]:
    return [*SW_METHODS, *hh_methods(), HAAR, "k-RR",
            *(f"dBitFlip b={b}" for b in DBITFLIP_B)]


def one_blas_thread() -> None:
    """BLAS on one thread, in this process and each worker: the products here are a few
    hundred rows (Square Wave's EM at D = 1024 the largest), which gain nothing from BLAS
    threads, and beside the other worker a threaded BLAS oversubscribes the cores: the
    reference EM fit at n = 10⁵ took 5× the CPU on two threads, for the same numbers (as the
    collector's own fits, ``estimators/distribution.py``)."""
    threadpool_limits(limits=1, user_api="blas")


def _parallel(function: Callable[..., T], tasks: list[tuple[Any, ...]], workers: int,
              description: str) -> list[T]:
    """``function(*task)`` for every task, in ``workers`` processes (in this one if 1), the
    results in the tasks' order; the largest (first argument n where there is one) first."""
    results: list[T | None] = [None] * len(tasks)
    with progress_bar(len(tasks), "task", description) as bar:
        if workers <= 1:
            for i, task in enumerate(tasks):
                results[i] = function(*task)
                bar.update()
        else:
            order = sorted(range(len(tasks)), key=lambda i: -_size(tasks[i]))
            with ProcessPoolExecutor(workers, initializer=one_blas_thread) as pool:
                futures = {pool.submit(function, *tasks[i]): i for i in order}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
    return [r for r in results if r is not None]


def _size(task: tuple[Any, ...]) -> int:
    return next((a for a in task if isinstance(a, int) and not isinstance(a, bool)), 0)


def accuracy(shapes: list[str], sizes: list[int], epsilons: list[float], seeds: dict[int, int],
             rows: set[str], workers: int) -> list[dict[str, Any]]:
    settings = [(s, n, e) for s in shapes for n in sizes for e in epsilons]
    tasks = [(s, n, e, seed, rows) for s, n, e in settings for seed in range(seeds[n])]
    scored = iter(_parallel(run_setting, tasks, workers, "accuracy"))
    out = []
    for shape, n, epsilon in settings:
        runs = [next(scored) for _ in range(seeds[n])]
        for row in [r for r in all_rows() if r in runs[0]]:
            entry: dict[str, Any] = {"shape": shape, "n": n, "epsilon": epsilon, "method": row,
                                     "seeds": len(runs)}
            for metric in METRICS:
                values = [run[row][metric] for run in runs]
                entry[metric] = statistics.fmean(values)
                entry[f"{metric}_sd"] = statistics.stdev(values) if len(values) > 1 else None
            out.append(entry)
    return out


def coverage_run(shape_name: str, n: int, epsilon: float, run: int,
                 methods: dict[str, tuple[str, str]]) -> dict[str, np.ndarray]:
    """One seeded run: per method, whether each level's 95% interval (``finalize``) holds the
    population quantile, whether it holds the sample's own, and its width (unit scale)."""
    shape = SHAPES[shape_name]
    campaigns = _campaigns(shape, epsilon)
    mechanism = campaigns["sw"].mechanism
    assert isinstance(mechanism, DistributionMechanism)
    data_rng = np.random.default_rng([run, n, 99, list(SHAPES).index(shape_name)])
    unit = _unit(mechanism, shape.draw(data_rng, n))
    truth = Truth.of(unit)
    out = {}
    for index, (row, (key, method)) in enumerate(methods.items()):
        campaign = campaigns[key]
        rng = np.random.default_rng([run, n, 98, index])
        estimate = estimator_for(key).finalize(
            campaign, n, _fold(campaign, unit, rng), Query(postprocessing=method,
                                                           quantiles=LEVELS))
        assert isinstance(estimate, DistributionEstimate)
        hits = np.zeros((3, len(LEVELS)))
        for i, stat in enumerate(estimate.quantiles):
            population = shape.quantile(LEVELS[i])
            sample = mechanism.from_unit(float(truth.quantiles[i]))
            hits[:, i] = (stat.ci_low <= population <= stat.ci_high,
                          stat.ci_low <= sample <= stat.ci_high,
                          mechanism.to_unit(stat.ci_high) - mechanism.to_unit(stat.ci_low))
        out[row] = hits
    return out


def coverage(shape_name: str, n: int, epsilon: float, runs: int,
             methods: dict[str, tuple[str, str]], workers: int) -> dict[str, Any]:
    """Share of ``runs`` seeded runs whose 95% quantile interval holds the population
    quantile (and the sample's own), per method and level; the mean width."""
    started = time.perf_counter()
    results = _parallel(coverage_run, [(shape_name, n, epsilon, run, methods)
                                       for run in range(runs)], workers, "coverage")
    hits = {row: np.sum([r[row] for r in results], axis=0) for row in methods}
    low, high = _binomial_band(runs, 0.95)
    return {"shape": shape_name, "n": n, "epsilon": epsilon, "runs": runs,
            "levels": list(LEVELS), "wall_s": time.perf_counter() - started,
            "consistent_with_95_percent": [low, high],
            "methods": {row: {"population": (v[0] / runs).tolist(),
                              "sample": (v[1] / runs).tolist(),
                              "mean_width_unit": (v[2] / runs).tolist()}
                        for row, v in hits.items()}}


def _binomial_band(runs: int, p: float, alpha: float = 0.05) -> tuple[float, float]:
    """The central 1 − α range of Binomial(runs, p)/runs (exact, from its CDF)."""
    pmf = [math.comb(runs, k) * p**k * (1 - p) ** (runs - k) for k in range(runs + 1)]
    cdf = np.cumsum(pmf)
    low = int(np.searchsorted(cdf, alpha / 2))
    high = int(np.searchsorted(cdf, 1 - alpha / 2))
    return low / runs, high / runs


def _slopes(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check 9: the least-squares slope of log W1 and log KS against log n, per method, shape
    and ε (−0.5 is the n^{−1/2} rate)."""
    out = []
    keys = sorted({(r["method"], r["shape"], r["epsilon"]) for r in results},
                  key=lambda k: (all_rows().index(k[0]), k[1], k[2]))
    for method, shape, epsilon in keys:
        points = sorted((r["n"], r["w1"], r["ks"]) for r in results
                        if (r["method"], r["shape"], r["epsilon"]) == (method, shape, epsilon))
        if len(points) < 2:
            continue
        x = np.log([p[0] for p in points])
        out.append({"method": method, "shape": shape, "epsilon": epsilon,
                    "w1_slope": float(np.polyfit(x, np.log([p[1] for p in points]), 1)[0]),
                    "ks_slope": float(np.polyfit(x, np.log([p[2] for p in points]), 1)[0])})
    return out


def _print_accuracy(results: list[dict[str, Any]]) -> None:
    head = (f"{'n':>9} {'ε':>4}  {'method':<14}{'W1':>9}{'KS':>9}{'|Δp50|':>9}{'|Δp95|':>9}"
            f"{'|Δp99|':>9}")
    for shape in dict.fromkeys(r["shape"] for r in results):
        print(f"\n{shape}: {SHAPES[shape].label} (metrics on the unit scale; mean over seeds)")
        print(head)
        for r in (r for r in results if r["shape"] == shape):
            print(f"{r['n']:>9,} {r['epsilon']:>4g}  {r['method']:<14}"
                  + "".join(f"{r[m]:>9.4f}" for m in METRICS))


def _print_slopes(slopes: list[dict[str, Any]]) -> None:
    if not slopes:
        return
    print("\nCheck 9: slope of log W1 / log KS against log n (−0.5 = n^{−1/2}), "
          "mean over shapes")
    methods = list(dict.fromkeys(s["method"] for s in slopes))
    epsilons = sorted({s["epsilon"] for s in slopes})
    print(f"{'method':<14}" + "".join(f"{f'ε={e:g} W1/KS':>16}" for e in epsilons))
    for method in methods:
        cells = []
        for e in epsilons:
            chosen = [s for s in slopes if s["method"] == method and s["epsilon"] == e]
            cells.append(f"{statistics.fmean(s['w1_slope'] for s in chosen):>8.2f}/"
                         f"{statistics.fmean(s['ks_slope'] for s in chosen):<7.2f}")
        print(f"{method:<14}" + "".join(f"{c:>16}" for c in cells))


def reference_comparison(settings: list[tuple[str, int, float, int]], workers: int
                         ) -> list[dict[str, Any]]:
    """Chorus's SW fits on the reference-code setting (Beta(5, 2), D = m̃ = 1024), scored
    with that run's metric: the CDF at the edges against the bucketed sample's. Settings are
    (row, n, ε, seeds)."""
    return _parallel(reference_setting, settings, workers, "reference")


def reference_setting(row: str, n: int, epsilon: float, seeds: int) -> dict[str, Any]:
    """One reference-code setting, averaged over its seeds."""
    # Built directly: a campaign's config allows at most 512 Square Wave buckets (each query
    # refits the bootstrap), the reference setting has 1024.
    campaign = Campaign(name="beta-5-2", mechanism=SquareWave(
        domain=NumericRange(0.0, 1.0), epsilon=epsilon, buckets=REFERENCE_BUCKETS,
        output_buckets=REFERENCE_BUCKETS))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, DistributionMechanism)
    w1, ks = [], []
    for seed in range(seeds):
        values = np.random.default_rng([seed, n, 5, 2]).beta(5.0, 2.0, n)
        state = _fold(campaign, values, np.random.default_rng([seed, n, round(epsilon * 100),
                                                               52]))
        cdf, _ = _cdf_and_quantiles(_distribution_rows(campaign, n, state, {
            row: SW_METHODS[row]})[row], mechanism)
        edges = np.linspace(0.0, 1.0, REFERENCE_BUCKETS + 1)
        # The bucketed sample's CDF at the edges (np.histogram's last bucket is closed).
        truth = np.searchsorted(np.sort(values), edges, side="right") / n
        gap = np.abs(cdf[1:] - truth[1:])
        w1.append(float(gap.sum() / REFERENCE_BUCKETS))
        ks.append(float(gap.max()))
    reference = REFERENCE_CODE.get((row, n, epsilon))
    return {"method": row, "n": n, "epsilon": epsilon, "seeds": seeds,
            "w1": statistics.fmean(w1), "ks": statistics.fmean(ks),
            "reference_w1": reference[0] if reference else None,
            "reference_ks": reference[1] if reference else None,
            "reference_source": REFERENCE_SOURCE}


def _print_reference(rows: list[dict[str, Any]]) -> None:
    print(f"\nSW against the authors' reference code: Beta(5, 2), D = m̃ = {REFERENCE_BUCKETS}, "
          "W1/KS at the edges against the bucketed sample")
    print(f"({REFERENCE_SOURCE}; the SW paper's own figures were not available)")
    print(f"{'n':>9} {'ε':>4}  {'method':<8}{'W1':>9}{'ref W1':>9}{'KS':>9}{'ref KS':>9}"
          f"{'seeds':>7}")
    for r in rows:
        ref_w1 = f"{r['reference_w1']:>9.4f}" if r["reference_w1"] is not None else f"{'–':>9}"
        ref_ks = f"{r['reference_ks']:>9.4f}" if r["reference_ks"] is not None else f"{'–':>9}"
        print(f"{r['n']:>9,} {r['epsilon']:>4g}  {r['method']:<8}{r['w1']:>9.4f}{ref_w1}"
              f"{r['ks']:>9.4f}{ref_ks}{r['seeds']:>7}")


def _print_coverage(result: dict[str, Any]) -> None:
    low, high = result["consistent_with_95_percent"]
    print(f"\nQuantile-interval coverage (95% intervals), {result['shape']}, n = "
          f"{result['n']:,}, ε = {result['epsilon']:g}, {result['runs']} runs "
          f"(binomial 95% range at nominal 0.95: {low:.2f}–{high:.2f}; target 0.93–0.97)")
    print(f"{'method':<10}" + "".join(f"{f'p{round(q * 100)} pop/sample':>20}"
                                      for q in result["levels"]) + f"{'mean width':>24}")
    for row, v in result["methods"].items():
        print(f"{row:<10}" + "".join(f"{p:>13.2f}/{s:<6.2f}" for p, s in
                                     zip(v["population"], v["sample"], strict=True))
              + "  " + "/".join(f"{w:.4f}" for w in v["mean_width_unit"]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="n = 10⁴, ε = 1, one seed, 4 coverage runs (a smoke test)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" /
                        "distributions.json")
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"rows to run (default all: {', '.join(all_rows())})")
    parser.add_argument("--coverage-runs", type=int, default=None)
    parser.add_argument("--reference-reports", type=int, default=100_000,
                        help="with --quick: n of the one reference-code setting (default 10⁵, "
                             "the smallest the reference run has figures for; the test "
                             "suite's smoke run takes 10⁴, where the EM fit at D = 1024 "
                             "costs a seventh as much and the row has no reference figures)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes (default 2: the runs are independent)")
    args = parser.parse_args(argv)
    one_blas_thread()
    rows = set(args.methods or all_rows())
    unknown = rows - set(all_rows())
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; known: {all_rows()}")
    started = time.perf_counter()
    if args.quick:
        sizes, epsilons, seeds = [10_000], [1.0], {10_000: 1}
        coverage_n, runs = 10_000, 4
    else:
        sizes, epsilons, seeds = list(SIZES), list(EPSILONS), SEEDS
        coverage_n, runs = 100_000, 100
    runs = args.coverage_runs if args.coverage_runs is not None else runs
    results = accuracy(list(SHAPES), sizes, epsilons, seeds, rows, args.workers)
    accuracy_s = time.perf_counter() - started
    slopes = _slopes(results)
    # SW+EMS states no interval (its answers' ci_low/ci_high are None): HH only.
    interval_methods = {row: spec for row, spec in (("HH", ("hh", hh_methods()["HH"])),)
                        if row in rows}
    if args.quick:
        reference_settings = [("SW+EMS", args.reference_reports, 1.0, 1)]
    else:
        # EM at D = 1024 runs thousands of iterations (~20 s a fit): one seed.
        reference_settings = [(row, n, e, 3 if n == 100_000 and row == "SW+EMS" else 1)
                              for row, n, e in sorted(REFERENCE_CODE, key=lambda k: (k[1], k[0]
                                                                                   != "SW+EMS",
                                                                                   k[2]))]
    reference = reference_comparison([s for s in reference_settings if s[0] in rows],
                                     args.workers)
    covered = coverage("lognormal", coverage_n, 1.0, runs, interval_methods, args.workers) \
        if interval_methods and runs > 0 else None
    output = {"quick": args.quick, "buckets": BUCKETS, "branching": BRANCHING,
              "levels": list(LEVELS), "shapes": {s.name: s.label for s in SHAPES.values()},
              "accuracy": results, "slopes": slopes, "coverage": covered,
              "reference_code": reference, "published": "not available (see the docstring)",
              "accuracy_wall_s": accuracy_s,
              "wall_s": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(output, indent=2))
    _print_accuracy(results)
    _print_slopes(slopes)
    if reference:
        _print_reference(reference)
    if covered:
        _print_coverage(covered)
    print(f"\naccuracy grid {accuracy_s:.0f} s, total {output['wall_s']:.0f} s; "
          f"written to {args.out}")
    return output


if __name__ == "__main__":
    main(sys.argv[1:])
