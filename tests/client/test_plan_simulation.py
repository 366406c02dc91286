"""The longitudinal benchmark's vectorized plan (benchmarks/longitudinal.py) draws what the real
client draws, so that the benchmark cannot drift from the client unnoticed.

Real clients (ephemeral, a fake clock advanced day by day, ``send_delay=0``, a transport that
keeps what is sent) report every day of a 30-day calendar at ε = 2 with a lifetime budget of 8
(4 reports each), half of them arriving late; the simulator draws as many installs. Both are held
to the exact law of the virtual schedule (``LONGITUDINAL.md`` §1.3, §1.6) and to each other by
χ² tests at p > 10⁻³ with fixed seeds; the design that spreads a late arrival's reports over
what remains must fail them (negative control).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
ALPHA = 1e-3


def _bench() -> Any:
    name = "longitudinal_bench"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "longitudinal.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def check() -> dict[str, Any]:
    """1,000 real clients against 1,000 simulated installs (a few seconds)."""
    result: dict[str, Any] = _bench().client_check(installs=1_000, periods=30, seed=11)
    return result


def test_the_real_client_plans_four_reports_at_the_default_caps(check: dict[str, Any]) -> None:
    bench = _bench()
    assert check["reports"] == 4
    sampling = bench.client_strategy("sampling")
    assert (sampling.reports, sampling.epsilon, len(sampling.days)) == (4, 2.0, 4)
    splitting = bench.client_strategy("splitting")
    assert splitting.reports == 365 and splitting.days == tuple(range(365))
    early = bench.client_strategy("early")
    assert early.days == tuple(range(8)) and early.early_days == 8


@pytest.mark.parametrize("feature", ["per-period counts", "reports per install",
                                     "first report's period"])
def test_client_and_simulator_follow_the_exact_law(check: dict[str, Any], feature: str) -> None:
    tests = check["tests"]
    for sample in ("client", "simulator"):
        result = tests[f"{sample}: {feature} vs exact law"]
        assert result["p"] > ALPHA, (sample, feature, result)
    result = tests[f"client vs simulator: {feature}"]
    assert result["p"] > ALPHA, (feature, result)


def test_the_clients_coins_and_the_collectors_estimate_are_the_benchmarks(
        check: dict[str, Any]) -> None:
    assert check["tests"]["client: coins vs p = e^ε/(e^ε+1)"]["p"] > ALPHA
    # finalize on a day's counts is exactly map + finalize on the clients' own reports
    assert check["estimator_max_difference"] <= 1e-12


def test_a_schedule_spread_over_the_remainder_fails_the_checks(check: dict[str, Any]) -> None:
    """Late arrivals that keep all r reports over what remains of the horizon are
    over-represented late: the counts per install and per period must give it away."""
    tests = check["tests"]
    for name in ("remainder: reports per install vs exact law",
                 "remainder: per-period counts vs exact law",
                 "client vs remainder: reports per install",
                 "client vs remainder: per-period counts"):
        assert tests[name]["p"] < ALPHA, (name, tests[name])
    assert check["simulator_matches_client"] and check["negative_control_caught"]


def test_every_subset_of_periods_is_equally_likely() -> None:
    """Floyd's draw, vectorized: all C(7, 3) = 35 subsets, 35,000 installs."""
    bench = _bench()
    slots = bench.draw_slots(np.random.default_rng(3), 35_000, 3, 7)
    assert (np.diff(slots, axis=1) > 0).all()  # distinct and sorted
    index = {subset: i for i, subset in enumerate(itertools.combinations(range(7), 3))}
    observed = np.bincount([index[tuple(row)] for row in slots.tolist()], minlength=35)
    assert stats.chisquare(observed).pvalue > ALPHA


def test_the_exact_law_sums_to_one_and_matches_the_virtual_schedule() -> None:
    bench = _bench()
    law = bench.exact_law(30, 4)
    assert law["count"].sum() == pytest.approx(1) and law["first"].sum() == pytest.approx(1)
    # An install arriving on day 1 makes r reports; one arriving on t0, r·(T − t0)/T on average.
    arrival = bench.arrival_law(30)
    expected = sum(w * 4 * (30 - t0) / 30 for t0, w in enumerate(arrival))
    assert law["count"] @ np.arange(5) == pytest.approx(expected)
    assert law["per_period"].sum() == pytest.approx(expected)
    assert law["per_period"][0] == pytest.approx(0.5 * 4 / 30)
    assert law["pair"][0, 1] == pytest.approx(0.5 * 4 * 3 / (30 * 29))


def test_the_populations_hold_their_shares() -> None:
    """Fixed: exactly 30% until the step day, 35% from it. Churn: as many installs active every
    day, 10% a month replaced, nobody leaving before arriving."""
    bench = _bench()
    fixed = bench.population(10_000, np.random.default_rng(5))
    assert (fixed.ones[:199] == 3_000).all() and (fixed.ones[199:] == 3_500).all()
    assert fixed.switches.sum() == 500 and len(fixed.arrival) == 10_000
    churn = bench.population(10_000, np.random.default_rng(5), churn=0.1)
    per_day = round(10_000 * 0.1 * 12 / 365)
    assert len(churn.arrival) == 10_000 + 364 * per_day
    assert (churn.departure > churn.arrival).all()
    for day in (0, 100, 364):
        active = (churn.arrival <= day) & (churn.departure > day)
        assert active.sum() == 10_000
        assert churn.value_on(np.flatnonzero(active), np.full(10_000, day)).sum() \
            == churn.ones[day]
    assert math.isclose(churn.truth[199] - churn.truth[198], 0.05, abs_tol=0.01)
