"""Quantile accuracy and interval coverage: ``python benchmarks/quantiles.py [--quick]``.

Issue 34: Chorus's ``hh`` quantiles (the tree walk, and its interval from the same walk on
the CDF's 95% band) beside Square Wave + EMS (Chorus's ``sw``, Li et al. SIGMOD 2020, which
states no interval since its bootstrap's did not cover, so it has no coverage column) and
two plain readings of the same ``hh`` fit (the consistent, unbiased leaves of
Cormode–Kulkarni–Srivastava with Hay et al.'s consistency): the running maximum of F̂ (the
first edge where it reaches q) and the isotonic fit of F̂ (Chorus's read before issue 34); on
the same populations, n and ε.

* Populations: ``latency-log``: LogNormal(ln 200 ms, 0.5) on a log grid [1, 10⁴] ms (the
  audit's setting); ``latency-linear``: the same on a linear grid [0, 1000] ms;
  ``bimodal-linear``: 0.6·N(300, 60²) + 0.4·N(750, 50²) on [0, 1000]. ε = 1, D = 256 buckets
  (hh: B = 4; sw: 256 output buckets), n ∈ {10⁴, 10⁵, 10⁶}.
* Variance model: i.i.d. sampling; the target is the population quantile. ``hh``'s merged
  state is drawn in bulk from the exact distribution of its counts (tests/helpers/hhsample.py,
  checked against the client's randomizer in tests/mechanisms/test_hierarchical.py); ``sw``'s
  output counts are Multinomial(n, M·θ) for the exact transition matrix M and the bucket
  shares θ — exact for values uniform inside each bucket on the campaign's scale, which
  differs from the population by less than a bucket's width.
* Metrics, per quantile: RMSE and bias over the runs (in ms) and the coverage of the 95%
  interval (hh). At R runs a true 0.95 reads within ±2·√(0.95·0.05/R) (printed).

Writes ``bench-results/quantiles.json``. Every loop is bounded by its counts; ``sw`` gets
its own number of runs (``--sw-runs``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from chorus_collector.estimators import Query, estimator_for  # noqa: E402
from chorus_collector.estimators.distribution import (  # noqa: E402
    DistributionEstimator,
    quantile_of,
)
from chorus_collector.estimators.square_wave import transition_matrix  # noqa: E402
from chorus_shared import Campaign, campaign_from_spec  # noqa: E402
from chorus_shared.mechanisms import HierarchicalHistogram, SquareWave  # noqa: E402
from helpers.hhsample import sample_state  # noqa: E402

LEVELS = (0.5, 0.9, 0.95, 0.99)
EPSILON = 1.0
BUCKETS = 256


class Mixture:
    def __init__(self, parts: list[tuple[float, Any]]) -> None:
        self.parts = parts

    def cdf(self, x: float) -> float:
        return float(sum(w * d.cdf(x) for w, d in self.parts))

    def ppf(self, q: float) -> float:
        from scipy.optimize import brentq

        return float(brentq(lambda x: self.cdf(x) - q, -1e9, 1e9, xtol=1e-10))


POPULATIONS: dict[str, tuple[str, float, float, Any]] = {
    "latency-log": ("log", 1.0, 1e4, stats.lognorm(0.5, scale=200)),
    "latency-linear": ("linear", 0.0, 1000.0, stats.lognorm(0.5, scale=200)),
    "bimodal-linear": ("linear", 0.0, 1000.0,
                       Mixture([(0.6, stats.norm(300, 60)), (0.4, stats.norm(750, 50))])),
}


def campaign(mechanism: str, scale: str, lo: float, hi: float) -> Campaign:
    params: dict[str, Any] = {"buckets": BUCKETS, "scale": scale}
    if mechanism == "hh":
        params["branching"] = 4
    return campaign_from_spec({"name": f"q-{mechanism}", "mechanism": mechanism,
                               "epsilon": EPSILON, "params": params,
                               "domain": {"kind": "numeric", "lo": lo, "hi": hi}})


def shares(edges: list[float], population: Any) -> np.ndarray:
    cdf = np.array([population.cdf(e) for e in edges])
    cdf[0], cdf[-1] = 0.0, 1.0
    return np.diff(cdf)


def plain_reads(fitted: Any, q: float) -> dict[str, float]:
    """The two plain readings of the hh fit's consistent leaves, on the unit scale."""
    raw = np.concatenate([[0.0], np.cumsum(fitted.leaves)])
    running = np.clip(np.maximum.accumulate(raw), 0.0, 1.0)
    from chorus_collector.estimators.distribution import _monotone_cdf  # the old read

    return {"hh running max": quantile_of(running, q),
            "hh isotonic (before)": quantile_of(_monotone_cdf(raw), q)}


def run_setting(name: str, n: int, runs: int, sw_runs: int) -> dict[str, Any]:
    scale, lo, hi, population = POPULATIONS[name]
    truth = [population.ppf(q) for q in LEVELS]
    hh_campaign, sw_campaign = campaign("hh", scale, lo, hi), campaign("sw", scale, lo, hi)
    hh, sw = hh_campaign.mechanism, sw_campaign.mechanism
    assert isinstance(hh, HierarchicalHistogram) and isinstance(sw, SquareWave)
    hh_estimator = estimator_for("hh")
    sw_estimator = estimator_for("sw")
    assert isinstance(hh_estimator, DistributionEstimator)
    theta = shares(hh.edges(), population)
    outputs = transition_matrix(sw) @ theta
    outputs = np.clip(outputs, 0.0, None) / np.clip(outputs, 0.0, None).sum()
    query = Query(quantiles=LEVELS)
    values: dict[str, list[list[float]]] = {}
    hits: dict[str, list[list[bool]]] = {}
    rng = np.random.default_rng([34, n, list(POPULATIONS).index(name)])
    started = time.process_time()
    for run in range(runs):
        state = sample_state(hh, theta, n, rng)
        answer = hh_estimator.finalize(hh_campaign, n, state, query)
        values.setdefault("hh (Chorus)", []).append([s.value for s in answer.quantiles])
        hits.setdefault("hh (Chorus)", []).append(
            [s.ci_low <= t <= s.ci_high for s, t in zip(answer.quantiles, truth, strict=True)])
        fitted = hh_estimator.fit(hh, n, state, "none", uncertainty=False)
        reads = [plain_reads(fitted, q) for q in LEVELS]
        for key in reads[0]:
            values.setdefault(key, []).append([hh.from_unit(r[key]) for r in reads])
        if run < sw_runs:
            counts = rng.multinomial(n, outputs)
            answer = sw_estimator.finalize(sw_campaign, n, counts, Query(quantiles=LEVELS,
                                                                          postprocessing="ems"))
            values.setdefault("sw + EMS", []).append([s.value for s in answer.quantiles])
    rows = {}
    for method, table in values.items():
        array = np.array(table)
        error = array - np.array(truth)
        rows[method] = {
            "runs": len(table),
            "rmse": np.sqrt((error**2).mean(axis=0)).tolist(),
            "bias": error.mean(axis=0).tolist(),
            "bias_over_sd": (error.mean(axis=0) / array.std(axis=0, ddof=1)).tolist(),
            "coverage": np.mean(hits[method], axis=0).tolist() if method in hits else None,
        }
    return {"population": name, "n": n, "truth": truth, "methods": rows,
            "cpu_s": time.process_time() - started}


def print_setting(result: dict[str, Any]) -> None:
    labels = "/".join(f"p{round(100 * q)}" for q in LEVELS)
    truth = "/".join(f"{t:.0f}" for t in result["truth"])
    print(f"\n{result['population']}, n = {result['n']:,}, ε = {EPSILON} (true {labels}: "
          f"{truth} ms; {result['cpu_s']:.0f} s CPU)")
    print(f"  {'method':22} {'RMSE ' + labels:>34} {'bias/sd':>26} {'coverage':>26}")
    for method, row in result["methods"].items():
        rmse = "/".join(f"{x:.0f}" if x >= 10 else f"{x:.1f}" for x in row["rmse"])
        ratio = "/".join(f"{x:+.2f}" for x in row["bias_over_sd"])
        cover = "—" if row["coverage"] is None else "/".join(f"{x:.2f}" for x in row["coverage"])
        print(f"  {method:22} {rmse:>34} {ratio:>26} {cover:>26}  (R = {row['runs']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 10⁴ only, few runs")
    parser.add_argument("--runs", type=int, default=200, help="runs per setting (hh)")
    parser.add_argument("--sw-runs", type=int, default=40, help="runs per setting (sw)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--populations", nargs="*", default=list(POPULATIONS))
    args = parser.parse_args()
    runs, sw_runs, sizes = args.runs, args.sw_runs, args.sizes
    if args.quick:
        runs, sw_runs, sizes = 20, 4, [10_000]
    results = []
    for name in args.populations:
        for n in sizes:
            result = run_setting(name, n, runs, sw_runs)
            print_setting(result)
            results.append(result)
    for r in sorted({runs, sw_runs}):
        print(f"At R = {r} a true coverage of 0.95 reads within "
              f"±{2 * math.sqrt(0.95 * 0.05 / r):.3f}.")
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    (out / "quantiles.json").write_text(json.dumps(
        {"epsilon": EPSILON, "buckets": BUCKETS, "levels": LEVELS, "results": results},
        indent=1))


if __name__ == "__main__":
    main()
