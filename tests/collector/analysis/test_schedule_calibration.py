"""A scheduled campaign's per-period estimates are calibrated under the schedule's sampling of
installs, with late arrivals and value-dependent churn (docs/campaigns.md, "Over time").

Model F throughout: the population (each install's value, arrival and departure) is fixed;
each replicate draws every install's schedule afresh, as the client does (r of the T periods,
uniformly over the whole horizon, slots before the install arrived or after it left never
used: ``chorus_client.plan``), and every report's noise with the vectorized simulator
(``design/simulate.py``, which draws the client randomizer's distribution). Each period's
reports then go through the campaign's own estimator, ``map`` and ``finalize``, as the fold
and the estimates route run them. The truth is each period's share (or mean) among the
installs active in it.

Checks, with tolerances from theory at a per-check false alarm of ALPHA (seeds fixed):

* unbiased: the mean estimate is within z·σ/√R of the truth, σ² the exact variance;
* variance: the empirical variance over R replicates against the exact
  (v̄ + S²)·E[1/m | m ≥ 1] − S²/N (``chorus_shared.schedule.sampled_variance``), in a χ² band;
* coverage: the stated 95% intervals cover the truth at the rate theory gives them, within a
  binomial band. The stated SE is the plug-in (v̄ + S²)/m, so the intervals are slightly
  conservative: that rate is 2Φ(1.96·√κ) − 1 with κ = (v̄ + S²)·E[1/m] / σ² ≥ 1;
* negative control: had late installs drawn their r reports over what remains of the horizon
  (instead of forfeiting the periods already past), late installs would be over-represented
  and, as they hold other values, the plain per-period mean visibly biased.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from chorus_collector.analysis.windows import finalize, value_estimates
from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import Query, estimator_for
from chorus_shared.campaign import Campaign, campaign_from_spec
from chorus_shared.schedule import expected_inverse_count, sampled_variance
from helpers.support import chi2_band, z_threshold

ALPHA = 1e-4
EPSILON = 2.0
PERIODS = 30
REPORTS = 4  # r: what a share of 8 pays for at ε = 2
SCHEDULE = {"cadence": "day", "start": "2026-01-01", "periods": PERIODS}
Z95 = NormalDist().inv_cdf(0.975)


def _campaign(mechanism: str, domain: Any) -> Campaign:
    campaign = campaign_from_spec({"name": "c", "mechanism": mechanism, "epsilon": EPSILON,
                                   "domain": domain, "schedule": SCHEDULE,
                                   "privacy": {"budget": REPORTS * EPSILON}}, warn=False)
    assert campaign.reports_per_install == REPORTS
    return campaign


def virtual_schedules(rng: np.random.Generator, reps: int, arrive: np.ndarray,
                      leave: np.ndarray) -> np.ndarray:
    """(reps, installs, periods): whether each install reports in each period. Its r periods
    are a uniform r-subset of the whole horizon (the r smallest of T uniform keys); those
    before it arrived or after it left are forfeited."""
    keys = rng.random((reps, arrive.size, PERIODS))
    chosen = np.argpartition(keys, REPORTS - 1, axis=2)[..., :REPORTS]
    drawn = np.zeros(keys.shape, dtype=bool)
    np.put_along_axis(drawn, chosen, True, axis=2)
    return drawn & _active(arrive, leave)[None]


def spread_schedules(rng: np.random.Generator, reps: int, arrive: np.ndarray,
                     leave: np.ndarray) -> np.ndarray:
    """The design Chorus does not use: r periods uniform over what remains after arrival."""
    periods = np.arange(PERIODS)
    keys = rng.random((reps, arrive.size, PERIODS))
    keys[:, periods[None, :] < arrive[:, None]] = np.inf
    chosen = np.argpartition(keys, REPORTS - 1, axis=2)[..., :REPORTS]
    drawn = np.zeros(keys.shape, dtype=bool)
    np.put_along_axis(drawn, chosen, True, axis=2)
    return drawn & np.isfinite(keys) & _active(arrive, leave)[None]


def _active(arrive: np.ndarray, leave: np.ndarray) -> np.ndarray:
    periods = np.arange(PERIODS)
    return (periods[None, :] >= arrive[:, None]) & (periods[None, :] < leave[:, None])


def estimate_periods(campaign: Campaign, inputs: np.ndarray, reporting: np.ndarray,
                     rng: np.random.Generator, label: str) -> np.ndarray:
    """(reps, periods, 4): each period's estimate, stated SE and 95% interval (low, high),
    NaN for a period without reports. Every period's reports go through the real map and
    finalize."""
    mechanism = campaign.mechanism
    estimator = estimator_for(mechanism.name)
    reps = reporting.shape[0]
    out = np.full((reps, PERIODS, 4), np.nan)
    for rep in range(reps):
        period, install = np.nonzero(reporting[rep].T)  # ordered by period, then install
        payloads = simulate(mechanism, inputs[install], rng)
        bounds = np.searchsorted(period, np.arange(PERIODS + 1))
        for t in range(PERIODS):
            chunk = payloads[bounds[t]:bounds[t + 1]]
            if not chunk:
                continue
            state = estimator.map(mechanism, chunk)
            one = value_estimates(finalize(campaign, len(chunk), state, Query()))[label]
            out[rep, t] = one.estimate, one.std_error, one.ci_low, one.ci_high
    return out


def check_calibration(results: np.ndarray, truth: np.ndarray, variance: np.ndarray,
                      kappa: np.ndarray) -> None:
    """The three checks of the module docstring over (reps, periods) results."""
    reps, periods = results.shape[:2]
    estimates = results[..., 0]
    z = (estimates.mean(axis=0) - truth) / np.sqrt(variance / reps)
    assert np.abs(z).max() < z_threshold(ALPHA, periods), z
    ratio = estimates.var(axis=0, ddof=1) / variance
    low, high = chi2_band(reps - 1, ALPHA / periods)
    assert np.all((low < ratio) & (ratio < high)), ratio
    pooled_low, pooled_high = chi2_band(periods * (reps - 1), ALPHA)
    assert pooled_low < ratio.mean() < pooled_high, ratio.mean()
    covered = (results[..., 2] <= truth) & (truth <= results[..., 3])
    expected = np.array([2 * NormalDist().cdf(Z95 * math.sqrt(k)) - 1 for k in kappa])
    band = z_threshold(ALPHA) * np.sqrt(expected * (1 - expected) / reps / periods)
    assert abs(covered.mean() - expected.mean()) < band.mean(), (covered.mean(), expected)
    # Unconditionally, too: the intervals never cover less than their nominal 95%.
    assert covered.mean() > 0.95 - band.mean()


def _exact(per_report: np.ndarray, spread: np.ndarray, active: np.ndarray,
           stated: Callable[[int], float]) -> tuple[np.ndarray, np.ndarray]:
    """The exact variance of each period's mean, and κ (stated SE² over it, on average)."""
    probability = REPORTS / PERIODS
    variance = np.array([sampled_variance(v, s, int(n), probability)
                         for v, s, n in zip(per_report, spread, active, strict=True)])
    kappa = np.array([stated(int(n)) for n in active]) * (per_report + spread) / variance
    return variance, kappa


def _stated(n: int) -> float:
    return expected_inverse_count(n, REPORTS / PERIODS)


def test_a_fixed_population_is_estimated_without_bias_at_the_exact_variance() -> None:
    """Everyone active for the whole horizon: k-RR (a share) and Duchi (a mean)."""
    rng = np.random.default_rng(20260101)
    installs, reps = 2000, 2000
    arrive, leave = np.zeros(installs, int), np.full(installs, PERIODS)
    reporting = np.concatenate([virtual_schedules(rng, 100, arrive, leave)[:, :, :1]
                                for _ in range(reps // 100)])  # one period per replicate
    cases = [(_campaign("krr", ["0", "1"]), (np.arange(installs) < 600).astype(np.int64),
              "1"),
             (_campaign("duchi", {"kind": "numeric", "lo": -1, "hi": 1}),
              0.8 * np.linspace(-1, 1, installs) ** 3 + 0.2, "mean")]
    for campaign, inputs, label in cases:
        results = _estimate_first_period(campaign, inputs, reporting, rng, label)
        mean = inputs.mean()
        spread = np.array([inputs.var(ddof=1)])
        if label == "1":  # k-RR: q(1 − q)/(p − q)² for either value (binary)
            p, q = campaign.mechanism.support_probabilities()
            per_report = np.array([q * (1 - q) / (p - q) ** 2])
        else:  # Duchi: C² − t² per report
            per_report = np.array([campaign.mechanism.c ** 2 - (inputs ** 2).mean()])
        variance, kappa = _exact(per_report, spread, np.array([installs]), _stated)
        check_calibration(results, np.array([mean]), variance, kappa)


def _estimate_first_period(campaign: Campaign, inputs: np.ndarray, reporting: np.ndarray,
                           rng: np.random.Generator, label: str) -> np.ndarray:
    mechanism, estimator = campaign.mechanism, estimator_for(campaign.mechanism.name)
    out = np.empty((reporting.shape[0], 1, 4))
    for rep in range(reporting.shape[0]):
        chunk = simulate(mechanism, inputs[reporting[rep, :, 0]], rng)
        state = estimator.map(mechanism, chunk)
        one = value_estimates(finalize(campaign, len(chunk), state, Query()))[label]
        out[rep, 0] = one.estimate, one.std_error, one.ci_low, one.ci_high
    return out


def churning_population(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Half the installs from the start, half arriving over the horizon and holding value 1
    three times as often; value-1 installs leave twice as fast as the others."""
    early, late = 1500, 1500
    values = np.concatenate([rng.random(early) < 0.2, rng.random(late) < 0.6]).astype(np.int64)
    arrive = np.concatenate([np.zeros(early, int), rng.integers(1, PERIODS, late)])
    hazard = np.where(values == 1, 0.04, 0.02)
    leave = np.minimum(arrive + rng.geometric(hazard), PERIODS + 1)
    return values, arrive, leave


def _truth(values: np.ndarray, arrive: np.ndarray, leave: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per period: the active installs' share of value 1, their number and their S²."""
    active = _active(arrive, leave)
    count = active.sum(axis=0)
    share = (active * values[:, None]).sum(axis=0) / count
    return share, count, share * (1 - share) * count / (count - 1)


def test_late_arrivals_and_value_dependent_churn_leave_every_period_unbiased() -> None:
    rng = np.random.default_rng(7)
    values, arrive, leave = churning_population(rng)
    share, count, spread = _truth(values, arrive, leave)
    assert share[0] < 0.25 and share[-1] > 0.35  # the population does change
    campaign = _campaign("krr", ["0", "1"])
    reporting = np.concatenate([virtual_schedules(rng, 50, arrive, leave) for _ in range(16)])
    results = estimate_periods(campaign, values, reporting, rng, "1")
    p, q = campaign.mechanism.support_probabilities()
    per_report = np.full(PERIODS, q * (1 - q) / (p - q) ** 2)
    variance, kappa = _exact(per_report, spread, count, _stated)
    check_calibration(results, share, variance, kappa)


def test_spreading_late_arrivals_over_the_remainder_is_biased() -> None:
    """Negative control: same population, the design Chorus does not use."""
    rng = np.random.default_rng(7)
    values, arrive, leave = churning_population(rng)
    share, count, spread = _truth(values, arrive, leave)
    campaign = _campaign("krr", ["0", "1"])
    reporting = np.concatenate([spread_schedules(rng, 50, arrive, leave) for _ in range(4)])
    results = estimate_periods(campaign, values, reporting, rng, "1")
    p, q = campaign.mechanism.support_probabilities()
    variance, _ = _exact(np.full(PERIODS, q * (1 - q) / (p - q) ** 2), spread, count, _stated)
    z = (results[..., 0].mean(axis=0) - share) / np.sqrt(variance / results.shape[0])
    late = slice(PERIODS // 2, PERIODS)
    assert z[late].mean() > 2 * z_threshold(ALPHA, PERIODS), z  # late installs over-weighted


@pytest.mark.parametrize("draw", [virtual_schedules, spread_schedules])
def test_the_simulated_schedules_draw_what_the_client_draws(draw: Any) -> None:
    """r periods per install in all (the virtual draw), each period with probability r/T."""
    rng = np.random.default_rng(3)
    installs = 20_000
    arrive, leave = np.zeros(installs, int), np.full(installs, PERIODS)
    reporting = draw(rng, 1, arrive, leave)[0]
    assert np.all(reporting.sum(axis=1) == REPORTS)
    rate = reporting.mean(axis=0)
    band = z_threshold(ALPHA, PERIODS) * math.sqrt(REPORTS / PERIODS / installs)
    assert np.all(np.abs(rate - REPORTS / PERIODS) < band)
