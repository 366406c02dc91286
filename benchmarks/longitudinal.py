"""Longitudinal collection under a lifetime budget: ``python benchmarks/longitudinal.py [--quick]``
(``make bench``).

Issue items 5–6 and ``LONGITUDINAL.md`` §1, §4.3 and §7.3 (Chorus's shared docs): how the
client's plan (each install reports in r of T periods drawn uniformly, at the full per-report ε)
serves a daily metric over a year, beside splitting ε over every day and today's behaviour of
spending it early, on the same simulated installs.

* **The plans are the client's own.** Each strategy is a campaign definition, and a real
  :class:`chorus_client.Client` with the default caps (max_epsilon 2, lifetime_budget 8) says
  what it does with it (``Client.plan()`` and a year of ``report()`` calls): *sampling*
  (``"schedule": {"cadence": "day", "start": "2026-01-01", "periods": 365}``,
  ``"privacy": {"budget": 8}``, ε = 2: 4 reports on drawn days), *splitting* (the same calendar
  at ε = 8/365: every day) and *spend early* (no calendar, a per-day policy at ε = 1: one
  report a day until the lifetime budget is spent, days 1–8).
* **A vectorized simulator of the plan** draws each install's r days uniformly without
  replacement (Floyd's algorithm, one numpy draw per slot for all installs at once), over the
  whole horizon whenever the install arrives, and forfeits the days before its arrival (the
  *virtual schedule*, ``LONGITUDINAL.md`` §1.6) and after it leaves. It is **checked against
  the real client** on a sample (:func:`client_check`, also ``tests/client/
  test_plan_simulation.py``): ``CHECK_INSTALLS`` real clients (ephemeral, a fake clock advanced
  day by day, ``send_delay=0``, a transport that keeps what is sent) over T = 30 days, half
  of them arriving late, against the simulator on as many installs: χ² tests of the per-period
  report counts (with their exact covariance), of each install's number of reports and of its
  first report's day against the exact law, and client against simulator; the client's coins
  against p = e^ε/(e^ε + 1); and the collector's estimator on the client's own reports.
* **Reports.** Given who reports on a day and their values, the day's reported 1s are
  Binomial(n₁, p) + Binomial(n₀, q) exactly (binary randomized response, q = 1 − p); the
  estimate, its standard error and its 95% interval are the collector's own
  (``estimator_for("rr").finalize`` on the day's counts: the plug-in binomial SE
  √(λ̂(1 − λ̂)/m)/(p − q), λ̂ clipped to [q, p]), and a day with fewer than the campaign's
  ``min_batch_size`` reports has no estimate, as the collector refuses it. A window pools the
  reports of its days (the mean of all its debiased reports), as a window query does.
* **Scenarios** (10⁶ installs, 365 days, ``--quick`` 10⁵): (a) a fixed population, 30% with
  value 1, 5% of the installs (50,000) switching 0 → 1 on day 200 (truth 0.30 → 0.35); (b) the
  same with churn: 10% of the installs replaced each month, spread evenly (3,288 a day, the
  departing chosen at random among the active), newcomers arriving with the virtual schedule
  and a value drawn from the current distribution (0.30, from day 200 0.35); the truth is the
  active population's share each day. Spend early's newcomers spend their own first 8 days.
* **Figures per strategy**: days with an estimate; median daily SE; the median over the days
  of each day's SE over that day's sampling bound, √ of
  ``chorus_shared.schedule.sampled_variance`` ((v̄ + S²)·E[1/m | m ≥ 1] − S²/N with
  v̄ = e^ε/(e^ε − 1)², S² = θ(1 − θ)·N/(N − 1), π = r/T) at ε = 2; the RMS of (θ̂ − θ)/SE;
  95% coverage over the days with its binomial band; z of days 186–199 against 200–213; the
  first day d ≥ 200 on which days d−27…d−14 against d−13…d differ at the 5% level (two-sided),
  and how often that comparison fired before the step (its false-alarm rate).
* **Targets** (sampling): an estimate every day; median SE within 10% of the bound; coverage
  0.93–0.97; the step detected within 14 days by the two-window comparison.
* **Change-driven collection** (THRESH, Joseph–Roth–Ullman–Waggoner, NeurIPS 2018), measured
  before being built, as ``LONGITUDINAL.md`` §4.3: its best case, an *oracle* that knows when
  the k changes happen and spends B/(k + 1) per stationary stretch on full-population
  collections (at most ε = 2 a report, c collections at ε = min(2, B/(k + 1)/c), the best c),
  against sampling pooled over each stretch, for k ∈ {0, 1, 2, 3, 5, 10, 30}: the formula at
  θ = 0.30, and a simulation (``--thresh-reps`` replicates of all installs, the share
  alternating 0.30/0.35 between stretches) with the formula for those stretches beside it.
* **Time**, wall and CPU per phase, against a baseline measured in the same run: drawing one
  uniform double per install-day (N × 365) with the same generator. Beside it the real client's
  cost per ``report()`` call in the check.

Writes ``bench-results/longitudinal.json`` and two SVG plots (daily estimates with their 95%
intervals against the truth, one panel per strategy; scenario (a) and (b)) into ``--svg-dir``
(default ``bench-results``; the docs' copy is ``docs/benchmarks/``). The full run took 80–90 s
on two cores (the THRESH replicates nine tenths of it), ``--quick`` 7 s (4 of them the 2,000
real clients). Everything is seeded: the figures repeat exactly, the times do not.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from chorus_client import Client
from chorus_client.transport import Response
from chorus_collector.dashboard.charts import PALETTE, nice_ticks
from chorus_collector.estimators import estimator_for
from chorus_collector.estimators.base import Query
from chorus_collector.results.estimates import FrequencyEstimate, FrequencyRow
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.schedule import sampled_variance

ROOT = Path(__file__).resolve().parents[1]
START = "2026-01-01"
START_SECONDS = 1_767_225_600  # 2026-01-01T00:00:00Z
DAY = 86_400
PERIODS = 365
BUDGET = 8.0  # the client's default lifetime budget, all of it for this one campaign
EPSILON = 2.0  # the client's default max_epsilon: the per-report ε of the sampling plan
EARLY_EPSILON = 1.0  # today's behaviour: ε = 1 a day until the budget is spent
INSTALLS = 1_000_000
QUICK_INSTALLS = 100_000
BEFORE, AFTER = 0.30, 0.35
STEP_DAY = 200  # 1-based: the share is AFTER from this day on
CHURN_PER_MONTH = 0.10
WINDOW = 14
ALPHA = 0.05  # the two-window comparison's level (two-sided)
KS = (0, 1, 2, 3, 5, 10, 30)  # changes per lifetime, for the THRESH table
THRESH_REPS = 100
QUICK_THRESH_REPS = 12
CHECK_INSTALLS = 2_000
CHECK_PERIODS = 30
CHECK_ALPHA = 1e-3  # a check fails below this p-value
SEED = 20_261_202
NAME = "metric"
DOMAIN = ["no", "yes"]


def rr_probabilities(epsilon: float) -> tuple[float, float]:
    """Binary randomized response: the true answer with p = e^ε/(e^ε + 1), else the other."""
    p = math.exp(epsilon) / (math.exp(epsilon) + 1)
    return p, 1 - p


def report_variance(epsilon: float) -> float:
    """v̄: the variance of one debiased binary-RR report, e^ε/(e^ε − 1)², whatever the value."""
    return math.exp(epsilon) / math.expm1(epsilon) ** 2


# -- the strategies, as campaigns the real client plans ----------------------------------------


def campaign_spec(strategy: str, periods: int = PERIODS) -> dict[str, Any]:
    """The campaign definition of a strategy (``sampling``, ``splitting`` or ``early``)."""
    schedule = {"cadence": "day", "start": START, "periods": periods}
    if strategy == "sampling":
        return {"name": NAME, "mechanism": "rr", "epsilon": EPSILON, "domain": DOMAIN,
                "privacy": {"budget": BUDGET}, "schedule": schedule}
    if strategy == "splitting":
        return {"name": NAME, "mechanism": "rr", "epsilon": BUDGET / periods, "domain": DOMAIN,
                "privacy": {"budget": BUDGET}, "schedule": schedule}
    if strategy == "early":
        return {"name": NAME, "mechanism": "rr", "epsilon": EARLY_EPSILON, "domain": DOMAIN,
                "privacy": {"unit": "day", "budget": EARLY_EPSILON}}
    raise ValueError(f"unknown strategy {strategy!r}")


LABELS = {"sampling": "sampling (r = 4 at ε = 2)", "splitting": "splitting (ε = 8/365 a day)",
          "early": "spend early (ε = 1 a day, days 1–8)"}


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CollectingTransport:
    """Accepts every batch of reports and keeps them; anything else is a test failure."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        if method != "POST" or not url.endswith("/v1/reports") or body is None:
            raise AssertionError(f"unexpected request {method} {url}")
        batch = json.loads(body)["reports"]
        self.reports.extend(batch)
        answer = {"results": [{"status": "accepted"} for _ in batch]}
        return Response(200, json.dumps(answer).encode(),
                        {"Content-Type": "application/json"})


def real_client(config: Mapping[str, Any], clock: FakeClock, rng: random.Random,
                transport: CollectingTransport) -> Client:
    """A real client with the default caps, the config shipped with the app."""
    return Client("http://collector.test", ephemeral=True, campaigns={NAME: dict(config)},
                  send_delay=0, transport=transport, rng=rng, allow_insecure_rng=True,
                  clock=clock)


@dataclass(frozen=True)
class Strategy:
    """A strategy as the real client plans it."""

    key: str
    label: str
    campaign: Campaign
    epsilon: float  # per report
    reports: int  # the client's plan: reports per install over the horizon
    days: tuple[int, ...]  # the days (0-based) one real install arriving on day 1 reported on

    @property
    def early_days(self) -> int:
        """Spend early: how many consecutive days from its arrival an install reports."""
        return len(self.days) if self.campaign.schedule is None else 0


def client_strategy(key: str, seed: int = 1, periods: int = PERIODS) -> Strategy:
    """What a real client with the default caps plans for this strategy, and a year of its
    ``report()`` calls from day 1 (which days it reported on)."""
    campaign = campaign_from_spec(campaign_spec(key, periods))
    clock = FakeClock(START_SECONDS + 3600)
    transport = CollectingTransport()
    client = real_client(campaign.public_config(), clock, random.Random(seed), transport)
    (plan,) = client.plan()
    days = []
    logger = logging.getLogger("chorus.client")
    level = logger.level
    logger.setLevel(logging.ERROR)  # spend early's "budget spent" warning is the point here
    try:
        for day in range(periods):
            clock.now = START_SECONDS + day * DAY + 7200
            if client.report(NAME, "yes") == "queued":
                days.append(day)
    finally:
        logger.setLevel(level)
    client.close()
    return Strategy(key=key, label=LABELS[key], campaign=campaign, epsilon=plan.epsilon,
                    reports=plan.reports, days=tuple(days))


# -- the vectorized plan -----------------------------------------------------------------------


def draw_slots(rng: np.random.Generator, installs: int, reports: int,
               periods: int) -> np.ndarray:
    """Each install's ``reports`` distinct periods out of ``periods``, every subset equally
    likely (as ``chorus_shared.schedule.draw_periods``), for all installs at once: Floyd's
    algorithm, for j = T − r … T − 1 draw t uniform in [0, j] and take t, or j if t is taken."""
    out = np.empty((installs, reports), dtype=np.int32)
    for k, j in enumerate(range(periods - reports, periods)):
        t = rng.integers(0, j + 1, size=installs, dtype=np.int32)
        if k:
            taken = (out[:, :k] == t[:, None]).any(axis=1)
            t = np.where(taken, np.int32(j), t)
        out[:, k] = t
    out.sort(axis=1)
    return out


def draw_remainder_slots(rng: np.random.Generator, first: np.ndarray, reports: int,
                         periods: int) -> np.ndarray:
    """The *wrong* design for late arrivals (``LONGITUDINAL.md`` §1.6, "spread over the
    remainder"): r periods drawn from [first, T) only. A negative control for the checks;
    padded with ``periods`` where fewer than r remain."""
    keys = rng.random((len(first), periods))
    keys[np.arange(periods)[None, :] < first[:, None]] = np.inf
    order = np.argsort(keys, axis=1)[:, :reports].astype(np.int32)
    remaining = (periods - first)[:, None]
    order[np.arange(reports)[None, :] >= remaining] = periods
    order.sort(axis=1)
    return order


# -- the check against the real client ---------------------------------------------------------


@dataclass(frozen=True)
class PlanSample:
    """Installs of one sample: when each arrived, and the periods of its reports."""

    periods: int
    arrival: np.ndarray  # (n,) first period the install is active
    reported: np.ndarray  # (n, T) bool: a report for that period

    @property
    def installs(self) -> int:
        return len(self.arrival)

    def counts(self) -> np.ndarray:
        counts: np.ndarray = self.reported.sum(axis=0)
        return counts

    def reports_per_install(self) -> np.ndarray:
        per_install: np.ndarray = self.reported.sum(axis=1)
        return per_install

    def first_report(self) -> np.ndarray:
        """The period of each install's first report, ``periods`` for none."""
        any_report = self.reported.any(axis=1)
        return np.where(any_report, self.reported.argmax(axis=1), self.periods)


def arrival_law(periods: int) -> np.ndarray:
    """P(an install arrives in period t): half on the first day, half uniformly later."""
    law = np.full(periods, 0.5 / (periods - 1))
    law[0] = 0.5
    return law


def real_client_sample(installs: int, periods: int, seed: int,
                       share: float = BEFORE) -> tuple[PlanSample, dict[str, Any]]:
    """``installs`` real clients on the sampling campaign over ``periods`` days, each arriving
    on a day drawn from :func:`arrival_law` and calling ``report()`` every day from then on
    with its value (1 with probability ``share``); what they sent, and the coins."""
    config = campaign_from_spec(campaign_spec("sampling", periods)).public_config()
    law = arrival_law(periods).tolist()
    meta = random.Random(seed)
    arrival = np.empty(installs, dtype=np.int64)
    reported = np.zeros((installs, periods), dtype=bool)
    coins = np.zeros((2, 2), dtype=np.int64)  # [value, payload]
    day_payloads: list[list[int]] = [[] for _ in range(periods)]  # what the collector gets
    queued = calls = 0
    started = time.perf_counter()
    for i in range(installs):
        first = meta.choices(range(periods), weights=law)[0]
        value = int(meta.random() < share)
        clock = FakeClock(START_SECONDS + first * DAY + 3600)
        transport = CollectingTransport()
        client = real_client(config, clock, random.Random(seed * 1_000_003 + i), transport)
        for day in range(first, periods):
            clock.now = START_SECONDS + day * DAY + 7200
            queued += client.report(NAME, DOMAIN[value]) == "queued"
            calls += 1
        client.close()
        arrival[i] = first
        for report in transport.reports:
            day = (int(report["time"]) - START_SECONDS) // DAY
            if reported[i, day]:
                raise AssertionError(f"install {i} reported twice for period {day}")
            reported[i, day] = True
            coins[value, int(report["payload"])] += 1
            day_payloads[day].append(int(report["payload"]))
    seconds = time.perf_counter() - started
    if queued != reported.sum():
        raise AssertionError(f"{queued} reports queued, {reported.sum()} sent")
    return PlanSample(periods, arrival, reported), {
        "coins": coins, "day_payloads": day_payloads, "report_calls": calls,
        "us_per_report_call": seconds / max(calls, 1) * 1e6, "seconds": seconds}


def simulated_sample(installs: int, periods: int, reports: int, seed: int,
                     design: str = "virtual") -> PlanSample:
    """The vectorized simulator on ``installs`` installs arriving as in :func:`arrival_law`:
    the virtual schedule (the client's design) or, as a negative control, ``remainder``."""
    rng = np.random.default_rng(seed)
    arrival = rng.choice(periods, size=installs, p=arrival_law(periods))
    if design == "virtual":
        slots = draw_slots(rng, installs, reports, periods)
    elif design == "remainder":
        slots = draw_remainder_slots(rng, arrival, reports, periods)
    else:
        raise ValueError(f"unknown design {design!r}")
    kept = (slots >= arrival[:, None]) & (slots < periods)
    reported = np.zeros((installs, periods), dtype=bool)
    rows = np.repeat(np.arange(installs), reports).reshape(installs, reports)
    reported[rows[kept], slots[kept]] = True
    return PlanSample(periods, arrival, reported)


def exact_law(periods: int, reports: int) -> dict[str, np.ndarray]:
    """The exact law of one install's reports under the virtual schedule, arrivals as in
    :func:`arrival_law`: P(report in t), P(reports in t and s), P(K = k reports), P(first
    report in t) (index T: none)."""
    law = arrival_law(periods)
    total = math.comb(periods, reports)
    arrived_by = np.cumsum(law)  # P(t0 ≤ t)
    per_period = reports / periods * arrived_by
    both = reports * (reports - 1) / (periods * (periods - 1))
    pair = both * arrived_by[np.minimum.outer(np.arange(periods), np.arange(periods))]
    np.fill_diagonal(pair, per_period)
    count = np.zeros(reports + 1)
    first = np.zeros(periods + 1)
    for t0, weight in enumerate(law):
        left = periods - t0
        for k in range(reports + 1):
            count[k] += weight * math.comb(left, k) * math.comb(t0, reports - k) / total
        for j in range(t0, periods):
            first[j] += weight * math.comb(t0 + periods - 1 - j, reports - 1) / total
        first[periods] += weight * math.comb(t0, reports) / total
    return {"per_period": per_period, "pair": pair, "count": count, "first": first}


def pooled_groups(expected: np.ndarray, minimum: float = 5.0) -> list[list[int]]:
    """Adjacent categories merged until each group expects at least ``minimum``."""
    groups: list[list[int]] = []
    current: list[int] = []
    mass = 0.0
    for index, value in enumerate(expected):
        current.append(index)
        mass += float(value)
        if mass >= minimum:
            groups.append(current)
            current, mass = [], 0.0
    if current:
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def pool(values: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    return np.array([values[list(group)].sum() for group in groups])


def goodness_of_fit(observed: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Pearson's χ² of categorical counts against exact probabilities, small expected counts
    pooled."""
    expected = probabilities * observed.sum()
    groups = pooled_groups(expected)
    o, e = pool(observed.astype(float), groups), pool(expected, groups)
    statistic = float(((o - e) ** 2 / e).sum())
    dof = len(groups) - 1
    return {"chi2": statistic, "dof": dof, "p": float(stats.chi2.sf(statistic, dof))}


def period_counts_test(sample: PlanSample, law: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The per-period report counts against their exact law: each count is Binomial(N, π_t)
    (π_t = r/T · P(arrived by t)), and counts of different periods are dependent (an install
    has at most r reports): χ² = dᵀΣ⁻¹d with Σ = N·(P − ππᵀ), T degrees of freedom."""
    n = sample.installs
    pi = law["per_period"]
    covariance = n * (law["pair"] - np.outer(pi, pi))
    d = sample.counts() - n * pi
    statistic = float(d @ np.linalg.solve(covariance, d))
    dof = sample.periods
    return {"chi2": statistic, "dof": dof, "p": float(stats.chi2.sf(statistic, dof))}


def two_sample_counts_test(a: PlanSample, b: PlanSample) -> dict[str, float]:
    """Per-period report rates of two samples of i.i.d. installs, compared with the pooled
    covariance of the installs' report indicators (Hotelling's T², large-sample χ²_T)."""
    x, y = a.reported.astype(float), b.reported.astype(float)
    d = x.mean(axis=0) - y.mean(axis=0)
    pooled = (np.cov(x, rowvar=False) * (len(x) - 1) + np.cov(y, rowvar=False) *
              (len(y) - 1)) / (len(x) + len(y) - 2)
    covariance = pooled * (1 / len(x) + 1 / len(y))
    # A period nobody reported in, in either sample, has no variance: it drops out.
    statistic = float(d @ np.linalg.pinv(covariance) @ d)
    dof = int(np.linalg.matrix_rank(covariance))
    return {"chi2": statistic, "dof": dof, "p": float(stats.chi2.sf(statistic, dof))}


def homogeneity_test(a: np.ndarray, b: np.ndarray, categories: int,
                     probabilities: np.ndarray) -> dict[str, float]:
    """Two samples of a categorical feature, same law? χ² on the 2 × G table (categories
    pooled where the exact law expects few)."""
    groups = pooled_groups(probabilities * min(len(a), len(b)))
    table = np.array([pool(np.bincount(v, minlength=categories).astype(float), groups)
                      for v in (a, b)])
    statistic, p, dof, _ = stats.chi2_contingency(table, correction=False)
    return {"chi2": float(statistic), "dof": int(dof), "p": float(p)}


def coins_test(coins: np.ndarray, epsilon: float) -> dict[str, float]:
    """The client's payloads: P(report 1 | value 1) = p and P(report 1 | value 0) = q, two
    binomial z-scores squared and summed (χ²₂)."""
    p, q = rr_probabilities(epsilon)
    statistic = 0.0
    rates = []
    for value, rate in ((1, p), (0, q)):
        n = int(coins[value].sum())
        rates.append(coins[value, 1] / n)
        statistic += (coins[value, 1] - n * rate) ** 2 / (n * rate * (1 - rate))
    return {"chi2": float(statistic), "dof": 2, "p": float(stats.chi2.sf(statistic, 2)),
            "rate_value_1": float(rates[0]), "rate_value_0": float(rates[1]), "p_rr": p}


def estimator_identity(day_payloads: Sequence[Sequence[int]], campaign: Campaign) -> float:
    """The collector's estimator on the clients' own reports of each day (map + finalize)
    against this benchmark's path (finalize on the day's counts): the largest difference."""
    estimator = estimator_for("rr")
    worst = 0.0
    for payloads in day_payloads:
        n = len(payloads)
        if n < campaign.min_batch_size:
            continue
        mapped = yes_row(campaign, n, estimator.map(campaign.mechanism, payloads))
        ours = day_estimate(campaign, n, sum(payloads))
        assert ours is not None
        worst = max(worst, abs(mapped.frequency - ours[0]),
                    abs(mapped.frequency_std_error - ours[1]))
    return worst


def client_check(installs: int = CHECK_INSTALLS, periods: int = CHECK_PERIODS,
                 seed: int = 7) -> dict[str, Any]:
    """The vectorized simulator against ``installs`` real clients (and both against the exact
    law), with the remainder design as a negative control that must fail."""
    reports = client_strategy("sampling", periods=periods).reports
    client, extra = real_client_sample(installs, periods, seed)
    simulated = simulated_sample(installs, periods, reports, seed + 1)
    wrong = simulated_sample(installs, periods, reports, seed + 2, design="remainder")
    law = exact_law(periods, reports)
    campaign = campaign_from_spec(campaign_spec("sampling", periods))
    tests: dict[str, dict[str, float]] = {}
    for label, sample in (("client", client), ("simulator", simulated), ("remainder", wrong)):
        tests[f"{label}: per-period counts vs exact law"] = period_counts_test(sample, law)
        tests[f"{label}: reports per install vs exact law"] = goodness_of_fit(
            np.bincount(sample.reports_per_install(), minlength=reports + 1), law["count"])
        tests[f"{label}: first report's period vs exact law"] = goodness_of_fit(
            np.bincount(sample.first_report(), minlength=periods + 1), law["first"])
    for label, other in (("simulator", simulated), ("remainder", wrong)):
        tests[f"client vs {label}: per-period counts"] = two_sample_counts_test(client, other)
        tests[f"client vs {label}: reports per install"] = homogeneity_test(
            client.reports_per_install(), other.reports_per_install(), reports + 1,
            law["count"])
        tests[f"client vs {label}: first report's period"] = homogeneity_test(
            client.first_report(), other.first_report(), periods + 1, law["first"])
    tests["client: coins vs p = e^ε/(e^ε+1)"] = coins_test(extra["coins"], EPSILON)
    passed = {name: result["p"] > CHECK_ALPHA for name, result in tests.items()}
    controls = [name for name in tests if "remainder" in name]
    return {
        "installs": installs, "periods": periods, "reports": reports, "seed": seed,
        "alpha": CHECK_ALPHA, "tests": tests,
        "simulator_matches_client": all(ok for name, ok in passed.items()
                                        if name not in controls),
        "negative_control_caught": not all(passed[name] for name in controls),
        "estimator_max_difference": estimator_identity(extra["day_payloads"], campaign),
        "client_report_calls": extra["report_calls"],
        "client_us_per_report_call": extra["us_per_report_call"],
        "client_seconds": extra["seconds"],
        "mean_reports": {"client": float(client.reports_per_install().mean()),
                         "simulator": float(simulated.reports_per_install().mean()),
                         "exact": float(law["count"] @ np.arange(reports + 1))},
    }


# -- the populations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Population:
    """Every install that is ever active: when it arrives and leaves, its value on arrival and
    whether it switches 0 → 1 on the step day; and per day, how many are active with value 1."""

    arrival: np.ndarray  # int32, first active day (0-based)
    departure: np.ndarray  # int32, first day no longer active (PERIODS if never)
    value: np.ndarray  # bool, the value on arrival
    switches: np.ndarray  # bool
    active: np.ndarray  # (T,) int64
    ones: np.ndarray  # (T,) int64
    step: int  # 0-based first day of the new share

    @property
    def truth(self) -> np.ndarray:
        truth: np.ndarray = self.ones / self.active
        return truth

    def value_on(self, install: np.ndarray, day: np.ndarray) -> np.ndarray:
        value: np.ndarray = self.value[install] | (self.switches[install] & (day >= self.step))
        return value


def population(installs: int, rng: np.random.Generator, *, churn: float = 0.0,
               periods: int = PERIODS) -> Population:
    """``installs`` active installs every day, exactly BEFORE of them with value 1; on the
    step day 5% of them (chosen among the 0s) switch to 1. With ``churn`` (a fraction per
    month), that fraction per month is replaced, spread evenly over the days: the departing
    are chosen at random among the active, and each newcomer's value is 1 with the current
    share (BEFORE, from the step day AFTER)."""
    step = STEP_DAY - 1
    per_day = round(installs * churn * 12 / periods)
    total = installs + per_day * (periods - 1)
    arrival = np.zeros(total, dtype=np.int32)
    departure = np.full(total, periods, dtype=np.int32)
    value = np.zeros(total, dtype=bool)
    value[rng.permutation(installs)[:round(BEFORE * installs)]] = True
    switches = np.zeros(total, dtype=bool)
    seat = np.arange(installs)  # the install in each seat
    seat_value = value[:installs].copy()
    ones = np.empty(periods, dtype=np.int64)
    switching = round((AFTER - BEFORE) * installs)
    following = installs
    for day in range(periods):
        if day and per_day:
            seats = rng.choice(installs, per_day, replace=False)
            departure[seat[seats]] = day
            newcomers = np.arange(following, following + per_day)
            following += per_day
            arrival[newcomers] = day
            value[newcomers] = rng.random(per_day) < (AFTER if day >= step else BEFORE)
            seat[seats] = newcomers
            seat_value[seats] = value[newcomers]
        if day == step:
            zeros = np.flatnonzero(~seat_value & (arrival[seat] < day))
            chosen = rng.choice(zeros, switching, replace=False)
            switches[seat[chosen]] = True
            seat_value[chosen] = True
        ones[day] = int(seat_value.sum())
    return Population(arrival=arrival, departure=departure, value=value, switches=switches,
                      active=np.full(periods, installs, dtype=np.int64), ones=ones, step=step)


# -- who reports on which day, per strategy ----------------------------------------------------


def sampling_reporters(pop: Population, slots: np.ndarray,
                       periods: int = PERIODS) -> tuple[np.ndarray, np.ndarray]:
    """Installs reporting each day under the sampling plan, by value (0s, 1s): the drawn days
    on which the install is active (earlier ones forfeited, later ones lost when it leaves)."""
    kept = (slots >= pop.arrival[:, None]) & (slots < pop.departure[:, None])
    install = np.broadcast_to(np.arange(len(slots))[:, None], slots.shape)[kept]
    day = slots[kept]
    ones = pop.value_on(install, day)
    n1 = np.bincount(day[ones], minlength=periods)
    return np.bincount(day, minlength=periods) - n1, n1


def splitting_reporters(pop: Population) -> tuple[np.ndarray, np.ndarray]:
    """Every active install, every day."""
    return pop.active - pop.ones, pop.ones.copy()


def early_reporters(pop: Population, days: int,
                    periods: int = PERIODS) -> tuple[np.ndarray, np.ndarray]:
    """Every install on each of its first ``days`` days while active, then never again."""
    n0 = np.zeros(periods, dtype=np.int64)
    n1 = np.zeros(periods, dtype=np.int64)
    everyone = np.arange(len(pop.arrival))
    for k in range(days):
        day = pop.arrival + k
        active = day < np.minimum(pop.departure, periods)
        ones = pop.value_on(everyone[active], day[active])
        n1 += np.bincount(day[active][ones], minlength=periods)
        n0 += np.bincount(day[active][~ones], minlength=periods)
    return n0, n1


def reported_ones(rng: np.random.Generator, n0: np.ndarray, n1: np.ndarray,
                  epsilon: float) -> np.ndarray:
    """Each reporter's randomized response, summed per day: Binomial(n₁, p) + Binomial(n₀, q)."""
    p, q = rr_probabilities(epsilon)
    return rng.binomial(n1, p) + rng.binomial(n0, q)


# -- estimates, as the collector makes them ----------------------------------------------------


def day_estimate(campaign: Campaign, n: int,
                 ones: int) -> tuple[float, float, float, float] | None:
    """The collector's estimate of the share of "yes" from n reports of which ``ones`` said
    yes: (estimate, SE, 95% low, high); None below the campaign's ``min_batch_size``."""
    if n < campaign.min_batch_size:
        return None
    row = yes_row(campaign, n, np.array([n - ones, ones], dtype=np.int64))
    return (row.frequency, row.frequency_std_error, row.frequency_ci_low,
            row.frequency_ci_high)


def yes_row(campaign: Campaign, n: int, state: np.ndarray) -> FrequencyRow:
    """The collector's answer for "yes" from the folded state (the count of each answer)."""
    answer = estimator_for("rr").finalize(campaign, n, state, Query())
    assert isinstance(answer, FrequencyEstimate)
    return answer.rows[1]


@dataclass
class Series:
    """One strategy's daily reports and estimates (NaN where there is no estimate)."""

    reports: np.ndarray
    ones: np.ndarray
    estimate: np.ndarray = field(init=False)
    se: np.ndarray = field(init=False)
    low: np.ndarray = field(init=False)
    high: np.ndarray = field(init=False)

    def fill(self, campaign: Campaign) -> Series:
        rows = [day_estimate(campaign, int(n), int(k)) for n, k in zip(self.reports, self.ones,
                                                                         strict=True)]
        nan = (math.nan,) * 4
        columns = np.array([row if row is not None else nan for row in rows]).T
        self.estimate, self.se, self.low, self.high = columns
        return self

    @property
    def has_estimate(self) -> np.ndarray:
        has: np.ndarray = ~np.isnan(self.estimate)
        return has

    def window(self, campaign: Campaign, first: int,
               last: int) -> tuple[float, float] | None:
        """The pooled estimate of days first…last (0-based, inclusive) and its SE."""
        if first < 0:
            return None
        n = int(self.reports[first:last + 1].sum())
        found = day_estimate(campaign, n, int(self.ones[first:last + 1].sum()))
        return None if found is None else (found[0], found[1])

    def compare(self, campaign: Campaign, end: int, width: int = WINDOW) -> float | None:
        """z of the last ``width`` days up to ``end`` against the ``width`` days before."""
        earlier = self.window(campaign, end - 2 * width + 1, end - width)
        later = self.window(campaign, end - width + 1, end)
        if earlier is None or later is None:
            return None
        return (later[0] - earlier[0]) / math.hypot(earlier[1], later[1])


def sampling_bound(pop: Population, reports: int, epsilon: float,
                   periods: int = PERIODS) -> np.ndarray:
    """Each day's SE under the sampling plan (``schedule.sampled_variance``)."""
    cache: dict[tuple[int, int], float] = {}
    v = report_variance(epsilon)
    out = np.empty(periods)
    for day in range(periods):
        n, k = int(pop.active[day]), int(pop.ones[day])
        if (n, k) not in cache:
            theta = k / n
            spread = theta * (1 - theta) * n / (n - 1)
            cache[n, k] = math.sqrt(sampled_variance(v, spread, n, reports / periods))
        out[day] = cache[n, k]
    return out


def binomial_band(days: int, level: float = 0.95) -> tuple[float, float]:
    """Where the share of covered days falls with probability 95% if the intervals cover
    ``level`` of the time (binomial quantiles)."""
    if days == 0:
        return (math.nan, math.nan)
    return (float(stats.binom.ppf(0.025, days, level)) / days,
            float(stats.binom.ppf(0.975, days, level)) / days)


def summarize(series: Series, pop: Population, bound: np.ndarray, campaign: Campaign,
              periods: int = PERIODS) -> dict[str, Any]:
    """The figures of one strategy on one scenario."""
    has = series.has_estimate
    truth = pop.truth
    days = int(has.sum())
    covered = int(((series.low <= truth) & (truth <= series.high))[has].sum())
    critical = float(stats.norm.ppf(1 - ALPHA / 2))
    step = pop.step
    zs: dict[int, float | None] = {end: series.compare(campaign, end)
                                   for end in range(2 * WINDOW - 1, periods)}
    before = [z for end, z in zs.items() if end < step and z is not None]
    detected = next((end for end in range(step, periods)
                     if (z := zs[end]) is not None and abs(z) > critical), None)
    fixed = zs.get(step + WINDOW - 1)
    out: dict[str, Any] = {
        "days_with_estimate": days,
        "reports": int(series.reports.sum()),
        "median_reports_per_day": float(np.median(series.reports)),
        "median_se": float(np.median(series.se[has])) if days else None,
        "median_bound": float(np.median(bound)),
        # Each day's SE over that day's bound, the median over the days: the medians of the SEs
        # and of the bounds alone would mix the days before the step with the days after.
        "se_over_bound": float(np.median(series.se[has] / bound[has])) if days else None,
        "median_se_over_median_bound": float(np.median(series.se[has]) / np.median(bound))
        if days else None,
        "rms_z": float(np.sqrt(np.mean(((series.estimate - truth) / series.se)[has] ** 2)))
        if days else None,
        "coverage": covered / days if days else None,
        "covered_days": covered,
        "coverage_band": binomial_band(days),
        "z_186_199_vs_200_213": fixed,
        "detected_day": None if detected is None else detected + 1,
        "detected_after_days": None if detected is None else detected - step,
        "comparisons_before_step": len(before),
        "false_alarm_rate_before_step": (sum(abs(z) > critical for z in before) / len(before)
                                         if before else None),
    }
    return out


def targets(row: Mapping[str, Any], periods: int = PERIODS) -> dict[str, bool]:
    """The issue's targets, for the sampling plan."""
    coverage = row["coverage"]
    delay = row["detected_after_days"]
    return {"estimate every day": row["days_with_estimate"] == periods,
            "median SE within 10% of the bound": row["se_over_bound"] is not None
            and abs(row["se_over_bound"] - 1) <= 0.10,
            "coverage 0.93–0.97": coverage is not None and 0.93 <= coverage <= 0.97,
            "step detected within 14 days": delay is not None and delay < WINDOW}


@dataclass
class ScenarioResult:
    name: str
    population: Population
    bound: np.ndarray
    series: dict[str, Series]
    summary: dict[str, dict[str, Any]]


def run_scenario(name: str, pop: Population, strategies: Mapping[str, Strategy],
                 rng: np.random.Generator) -> ScenarioResult:
    """Every strategy on the same installs and values."""
    sampling = strategies["sampling"]
    slots = draw_slots(rng, len(pop.arrival), sampling.reports, PERIODS)
    reporters = {"sampling": sampling_reporters(pop, slots),
                 "splitting": splitting_reporters(pop),
                 "early": early_reporters(pop, strategies["early"].early_days)}
    bound = sampling_bound(pop, sampling.reports, sampling.epsilon)
    series: dict[str, Series] = {}
    summary: dict[str, dict[str, Any]] = {}
    for key, (n0, n1) in reporters.items():
        strategy = strategies[key]
        ones = reported_ones(rng, n0, n1, strategy.epsilon)
        series[key] = Series(reports=n0 + n1, ones=ones).fill(strategy.campaign)
        summary[key] = summarize(series[key], pop, bound, strategy.campaign)
    return ScenarioResult(name, pop, bound, series, summary)


# -- change-driven collection: the oracle against sampling (LONGITUDINAL.md §4.3) --------------


def oracle_collections(budget: float, cap: float = EPSILON) -> tuple[int, float]:
    """The oracle's best use of one stretch's budget: c full-population collections at
    ε = min(cap, budget/c), the c that minimizes v̄(ε)/c."""
    best = min(range(1, 257), key=lambda c: report_variance(min(cap, budget / c)) / c)
    return best, min(cap, budget / best)


def hypergeometric_moments(periods: int, reports: int, width: float) -> tuple[float, float]:
    """Mean and variance of an install's reports in ``width`` of ``periods`` periods."""
    pi = reports / periods
    return width * pi, width * pi * (1 - pi) * (periods - width) / (periods - 1)


def pooled_sampling_variance(installs: int, theta: float, width: float, reports: int = 4,
                             epsilon: float = EPSILON, periods: int = PERIODS) -> float:
    """Var of the pooled estimate of a stretch of ``width`` days under sampling
    (``LONGITUDINAL.md`` §1.3): v̄/(N·E K) + S²·Var K/(N·(E K)²)."""
    mean, var = hypergeometric_moments(periods, reports, width)
    spread = theta * (1 - theta)
    return report_variance(epsilon) / (installs * mean) + spread * var / (installs * mean**2)


def thresh_formula(installs: int, ks: Sequence[int] = KS) -> list[dict[str, Any]]:
    """The table of ``LONGITUDINAL.md`` §4.3 at θ = 0.30 (formulas)."""
    theta = BEFORE
    per_period = math.sqrt(sampled_variance(report_variance(EPSILON), theta * (1 - theta),
                                            installs, 4 / PERIODS))
    rows = []
    for k in ks:
        collections, epsilon = oracle_collections(BUDGET / (k + 1))
        oracle = math.sqrt(report_variance(epsilon) / (collections * installs))
        sampling = math.sqrt(pooled_sampling_variance(installs, theta, PERIODS / (k + 1)))
        rows.append({"k": k, "oracle_collections": collections, "oracle_epsilon": epsilon,
                     "oracle_se": oracle, "sampling_pooled_se": sampling,
                     "sampling_per_period_se": per_period, "sampling_over_oracle":
                     sampling / oracle})
    return rows


def thresh_simulation(installs: int, reps: int, rng: np.random.Generator,
                      ks: Sequence[int] = KS, reports: int = 4) -> list[dict[str, Any]]:
    """Both sides simulated: the share alternates between BEFORE and AFTER from one stretch to
    the next (5% of the installs switch at each change); per k, the RMS error of the stretch
    estimates over ``reps`` replicates, and the formula's RMS for the same stretches."""
    base = np.zeros(installs, dtype=bool)
    order = rng.permutation(installs)
    base[order[:round(BEFORE * installs)]] = True
    switcher = np.zeros(installs, dtype=bool)
    switcher[order[round(BEFORE * installs):round(AFTER * installs)]] = True
    p2, q2 = rr_probabilities(EPSILON)
    errors: dict[int, dict[str, list[float]]] = {k: {"oracle": [], "sampling": []} for k in ks}
    formula: dict[int, list[float]] = {k: [] for k in ks}
    # The slots are drawn install by install, row-major: each slot's holder is fixed.
    holder = np.repeat(np.arange(installs), reports)
    base_slot, switcher_slot = base[holder], switcher[holder]
    edges = {k: np.floor(np.arange(k + 2) * PERIODS / (k + 1)).astype(np.int32) for k in ks}
    truth_ones = {k: int(base.sum()) + int(switcher.sum()) * (np.arange(k + 1) % 2)
                  for k in ks}
    for _ in range(reps):
        flat = draw_slots(rng, installs, reports, PERIODS).ravel()
        for k in ks:
            stretch = np.searchsorted(edges[k], flat, side="right") - 1
            value = base_slot | (switcher_slot & (stretch % 2 == 1))
            n1 = np.bincount(stretch[value], minlength=k + 1)
            n = np.bincount(stretch, minlength=k + 1)
            ones = rng.binomial(n1, p2) + rng.binomial(n - n1, q2)
            truth = truth_ones[k] / installs
            estimate = (ones / n - q2) / (p2 - q2)
            errors[k]["sampling"].extend((estimate - truth).tolist())
            collections, epsilon = oracle_collections(BUDGET / (k + 1))
            p, q = rr_probabilities(epsilon)
            said = sum(rng.binomial(truth_ones[k], p) + rng.binomial(installs - truth_ones[k], q)
                       for _ in range(collections))
            oracle = (said / (collections * installs) - q) / (p - q)
            errors[k]["oracle"].extend((oracle - truth).tolist())
            if not formula[k]:
                widths = np.diff(edges[k])
                formula[k] = [pooled_sampling_variance(installs, float(t), float(w), reports)
                              for t, w in zip(truth, widths, strict=True)]
    rows = []
    for k in ks:
        row: dict[str, Any] = {"k": k, "reps": reps, "stretch_estimates": len(
            errors[k]["oracle"])}
        for side in ("oracle", "sampling"):
            e = np.array(errors[k][side])
            rms = float(np.sqrt(np.mean(e**2)))
            row[f"{side}_rms"] = rms
            # the RMS from m squared errors has a relative SE of about 1/√(2m)
            row[f"{side}_rms_se"] = rms / math.sqrt(2 * len(e))
        row["sampling_formula_rms"] = math.sqrt(float(np.mean(formula[k])))
        row["sampling_over_oracle"] = row["sampling_rms"] / row["oracle_rms"]
        rows.append(row)
    return rows


# -- the plot ----------------------------------------------------------------------------------


def svg_plot(result: ScenarioResult, strategies: Mapping[str, Strategy], title: str) -> str:
    """Daily estimates with their 95% intervals against the truth, one panel per strategy
    (each its own y scale), drawn by hand: the dashboard's ``line_chart`` draws one scale for
    all series and a circle with a title per point (its styles live in the dashboard's CSS);
    its tick rule (``nice_ticks``) and palette are reused."""
    width, left, right, panel, gap, head = 780, 58, 36, 150, 46, 40
    plot_width = width - left - right
    keys = list(result.series)
    height = head + len(keys) * (panel + gap) + 10
    truth = result.population.truth

    def x(day: float) -> float:
        return left + (day - 0.5) / PERIODS * plot_width

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
             'font-family="sans-serif" font-size="11">',
             f'<title>{escape(title)}</title>',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
             f'<text x="{left}" y="34" fill="#555">black: the true share; colour: the daily '
             'estimate and its 95% interval; dashed: day 200 (0.30 → 0.35)</text>']
    for index, key in enumerate(keys):
        series, strategy = result.series[key], strategies[key]
        summary = result.summary[key]
        top = head + index * (panel + gap) + 24
        has = series.has_estimate
        values = np.concatenate([truth, series.low[has], series.high[has]])
        ticks = covering_ticks(float(values.min()), float(values.max()))
        lo, hi = ticks[0], ticks[-1]

        def y(v: float, lo: float = lo, hi: float = hi, top: int = top) -> float:
            return top + (hi - v) / (hi - lo) * panel

        colour = PALETTE[index % len(PALETTE)]
        median_se = summary["median_se"]
        said = (f"{strategy.label}: estimates on {summary['days_with_estimate']} of "
                f"{PERIODS} days" + ("" if median_se is None else
                                     f", median SE {median_se:.4f}"))
        parts.append(f'<text x="{left}" y="{top - 8}" font-size="12">{escape(said)}</text>')
        for tick in ticks:
            parts.append(f'<line x1="{left}" x2="{left + plot_width}" y1="{y(tick):.1f}" '
                         f'y2="{y(tick):.1f}" stroke="#ddd"/><text x="{left - 6}" '
                         f'y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.3g}</text>')
        for day in (1, 60, 120, 180, 240, 300, 365):
            anchor = "start" if day == 1 else "middle"
            parts.append(f'<text x="{x(day) - (4 if day == 1 else 0):.1f}" '
                         f'y="{top + panel + 15}" text-anchor="{anchor}">day {day}</text>')
        parts.append(f'<line x1="{x(STEP_DAY - 0.5):.1f}" x2="{x(STEP_DAY - 0.5):.1f}" '
                     f'y1="{top}" y2="{top + panel}" stroke="#888" stroke-dasharray="4 3"/>')
        for run in _runs(has):
            band = [f"{x(d + 1):.1f},{y(series.high[d]):.1f}" for d in run] + \
                [f"{x(d + 1):.1f},{y(series.low[d]):.1f}" for d in reversed(run)]
            line = " ".join(f"{x(d + 1):.1f},{y(series.estimate[d]):.1f}" for d in run)
            if len(run) > 20:
                parts.append(f'<polygon points="{" ".join(band)}" fill="{colour}" '
                             'fill-opacity="0.25" stroke="none"/>')
                parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" '
                             'stroke-width="0.8"/>')
            else:
                for d in run:
                    parts.append(f'<line x1="{x(d + 1):.1f}" x2="{x(d + 1):.1f}" '
                                 f'y1="{y(series.low[d]):.1f}" y2="{y(series.high[d]):.1f}" '
                                 f'stroke="{colour}"/><circle cx="{x(d + 1):.1f}" '
                                 f'cy="{y(series.estimate[d]):.1f}" r="2" fill="{colour}"/>')
        steps = " ".join(f"{x(d + 0.5):.1f},{y(truth[d]):.1f} {x(d + 1.5):.1f},"
                         f"{y(truth[d]):.1f}" for d in range(PERIODS))
        parts.append(f'<polyline points="{steps}" fill="none" stroke="black" '
                     'stroke-width="1.2"/>')
        if not has[PERIODS // 2:].any():
            parts.append(f'<text x="{x(100):.1f}" y="{top + panel / 2:.1f}" '
                         'text-anchor="middle" fill="#555">no reports after day '
                         f'{int(np.flatnonzero(has).max()) + 1 if has.any() else 0}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def covering_ticks(low: float, high: float) -> list[float]:
    """The dashboard's round ticks, extended until they cover ``high`` (``nice_ticks`` may stop
    up to half a step below it)."""
    ticks = nice_ticks(low, high, 5)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    while ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _runs(mask: np.ndarray) -> list[list[int]]:
    """Stretches of consecutive True days."""
    runs: list[list[int]] = []
    for day in np.flatnonzero(mask).tolist():
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return runs


# -- time --------------------------------------------------------------------------------------


@dataclass
class Timer:
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.phases[name] = {"wall_s": time.perf_counter() - wall,
                             "cpu_s": time.process_time() - cpu}


def uniform_baseline(count: int, seed: int, chunk: int = 10_000_000) -> dict[str, float]:
    """Drawing ``count`` uniform doubles (in chunks) with the simulator's generator."""
    rng = np.random.default_rng(seed)
    wall, cpu = time.perf_counter(), time.process_time()
    left = count
    while left > 0:
        rng.random(min(chunk, left))
        left -= chunk
    return {"draws": count, "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu}


# -- output ------------------------------------------------------------------------------------


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json(value.tolist())
    if isinstance(value, np.generic):
        return _json(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _fmt(value: float | None, spec: str = ".4f", missing: str = "—") -> str:
    return missing if value is None or not math.isfinite(value) else format(value, spec)


def print_scenarios(results: Sequence[ScenarioResult],
                    strategies: Mapping[str, Strategy]) -> None:
    print("\n| scenario | strategy | reports per install | days with an estimate | median "
          "daily SE | SE / sampling bound | RMS z | 95% coverage (binomial band) | z, days "
          "186–199 vs 200–213 | step detected on day (days after) | false alarms before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        for key, row in result.summary.items():
            strategy = strategies[key]
            low, high = row["coverage_band"]
            coverage = "—" if row["coverage"] is None else \
                f"{row['coverage']:.3f} ({low:.2f}–{high:.2f})"
            detected = "never" if row["detected_day"] is None else \
                f"{row['detected_day']} (+{row['detected_after_days']})"
            print(f"| {result.name} | {strategy.label} | {strategy.reports} | "
                  f"{row['days_with_estimate']} | {_fmt(row['median_se'])} | "
                  f"{_fmt(row['se_over_bound'], '.3f')} | {_fmt(row['rms_z'], '.3f')} | "
                  f"{coverage} | {_fmt(row['z_186_199_vs_200_213'], '.1f', 'no reports')} | "
                  f"{detected} | {_fmt(row['false_alarm_rate_before_step'], '.3f')} |")
    bound = results[0].bound
    print(f"\nSampling bound (schedule.sampled_variance, ε = {EPSILON:g}, r = "
          f"{strategies['sampling'].reports}): {bound.min():.5f}–{bound.max():.5f} per day.")


def print_check(check: Mapping[str, Any]) -> None:
    print(f"\nThe simulator against {check['installs']:,} real clients (T = {check['periods']}, "
          f"r = {check['reports']}, half arriving late; p-values, fail below "
          f"{check['alpha']:g}):")
    print("| test | χ² | dof | p |")
    print("|---|---|---|---|")
    for name, test in check["tests"].items():
        print(f"| {name} | {test['chi2']:.1f} | {test['dof']} | {test['p']:.3g} |")
    means = check["mean_reports"]
    print(f"Mean reports per install: client {means['client']:.3f}, simulator "
          f"{means['simulator']:.3f}, exact {means['exact']:.3f}. Collector's estimator on the "
          f"clients' reports vs the benchmark's path: max difference "
          f"{check['estimator_max_difference']:.1e}.")
    print(f"Simulator matches the client: {check['simulator_matches_client']}; negative "
          f"control (remainder design) caught: {check['negative_control_caught']}.")


def print_thresh(formula: Sequence[Mapping[str, Any]],
                 simulated: Sequence[Mapping[str, Any]], installs: int) -> None:
    print(f"\nChange-driven (oracle) vs sampling, N = {installs:,}, T = {PERIODS}, B = "
          f"{BUDGET:g}: SE of a stretch's estimate")
    print("| k | oracle (c × ε) | oracle SE | sampling pooled SE | sampling / oracle | "
          "simulated: oracle | simulated: sampling (formula) | simulated ratio | "
          "sampling per day |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row, sim in zip(formula, simulated, strict=True):
        print(f"| {row['k']} | {row['oracle_collections']} × {row['oracle_epsilon']:.3g} | "
              f"{row['oracle_se']:.5f} | {row['sampling_pooled_se']:.5f} | "
              f"{row['sampling_over_oracle']:.2f} | {sim['oracle_rms']:.5f} ± "
              f"{sim['oracle_rms_se']:.5f} | {sim['sampling_rms']:.5f} ± "
              f"{sim['sampling_rms_se']:.5f} ({sim['sampling_formula_rms']:.5f}) | "
              f"{sim['sampling_over_oracle']:.2f} | {row['sampling_per_period_se']:.4f} |")


def thresh_verdict(formula: Sequence[Mapping[str, Any]]) -> str:
    """The table in words (ties, as at k = 0 where both are 4 reports at ε = 2 from everyone,
    count for neither)."""
    wins = [row for row in formula if row["sampling_over_oracle"] > 1 + 1e-9]
    losses = [row for row in formula if row["sampling_over_oracle"] < 1 - 1e-9]
    text = ("Change-driven collection, even as an oracle that knows when the changes happen "
            "and pays nothing to find out, ")
    if wins:
        text += (f"beats sampling only for k ≤ {max(r['k'] for r in wins)} changes per "
                 f"lifetime, by at most {max(r['sampling_over_oracle'] for r in wins):.2f}× in "
                 "SE")
    else:
        text += "never beats sampling"
    if losses:
        text += (f"; sampling is ahead from k = {min(r['k'] for r in losses)} "
                 f"({max(1 / r['sampling_over_oracle'] for r in losses):.2f}× at k = "
                 f"{max(r['k'] for r in losses)})")
    return text + (". THRESH adds vote budget and detection delay to the oracle and needs a "
                   "model of change: not built.")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_INSTALLS:,} installs, {QUICK_THRESH_REPS} THRESH replicates")
    parser.add_argument("--installs", type=int, default=None)
    parser.add_argument("--thresh-reps", type=int, default=None)
    parser.add_argument("--check-installs", type=int, default=CHECK_INSTALLS,
                        help="real clients in the check (0: no check)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "longitudinal.json")
    parser.add_argument("--svg-dir", type=Path, default=ROOT / "bench-results",
                        help="where the two plots go (the docs' copy: docs/benchmarks)")
    args = parser.parse_args(argv)
    installs = args.installs or (QUICK_INSTALLS if args.quick else INSTALLS)
    reps = args.thresh_reps if args.thresh_reps is not None else \
        (QUICK_THRESH_REPS if args.quick else THRESH_REPS)
    timer = Timer()
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    with timer.phase("client plans"):
        strategies = {key: client_strategy(key) for key in ("sampling", "splitting", "early")}
    check = None
    if args.check_installs:
        with timer.phase("check against real clients"):
            check = client_check(args.check_installs)
    rng = np.random.default_rng(args.seed)
    results = []
    for name, churn in (("fixed", 0.0), ("churn 10%/month", CHURN_PER_MONTH)):
        with timer.phase(f"scenario: {name}"):
            pop = population(installs, rng, churn=churn)
            results.append(run_scenario(name, pop, strategies, rng))
    with timer.phase("THRESH oracle vs sampling"):
        formula = thresh_formula(installs)
        simulated = thresh_simulation(installs, reps, rng) if reps else []
    total = {"wall_s": time.perf_counter() - started_wall,
             "cpu_s": time.process_time() - started_cpu}
    baseline = uniform_baseline(installs * PERIODS, args.seed + 1)
    args.svg_dir.mkdir(parents=True, exist_ok=True)
    plots = {}
    for result, stem in zip(results, ("longitudinal", "longitudinal-churn"), strict=True):
        path = args.svg_dir / f"{stem}.svg"
        title = (f"{installs:,} installs, {PERIODS} days, lifetime ε = {BUDGET:g}: "
                 f"{result.name} population")
        path.write_text(svg_plot(result, strategies, title))
        plots[result.name] = str(path)
    verdict = thresh_verdict(formula)
    output = {
        "quick": args.quick, "installs": installs, "periods": PERIODS, "budget": BUDGET,
        "seed": args.seed, "step_day": STEP_DAY, "shares": [BEFORE, AFTER],
        "churn_per_month": CHURN_PER_MONTH, "window": WINDOW,
        "strategies": {key: {"label": s.label, "epsilon": s.epsilon, "reports": s.reports,
                             "days_one_install_reported": list(s.days),
                             "campaign": s.campaign.public_config()}
                       for key, s in strategies.items()},
        "check": check,
        "scenarios": {r.name: {"summary": r.summary,
                               "targets": targets(r.summary["sampling"]),
                               "daily": {"truth": r.population.truth, "bound": r.bound,
                                         **{key: {"reports": s.reports, "estimate": s.estimate,
                                                  "se": s.se, "low": s.low, "high": s.high}
                                            for key, s in r.series.items()}}}
                      for r in results},
        "thresh": {"formula": formula, "simulated": simulated, "verdict": verdict},
        "time": {"phases": timer.phases, "total": total, "baseline_uniform_draws": baseline,
                 "total_over_baseline_wall": total["wall_s"] / baseline["wall_s"],
                 "total_over_baseline_cpu": total["cpu_s"] / max(baseline["cpu_s"], 1e-9)},
        "plots": plots,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_json(output), indent=1))
    print("Plans (real client, default caps): " + "; ".join(
        f"{s.label}: {s.reports} reports at ε = {s.epsilon:.4g}"
        for s in strategies.values()))
    print_scenarios(results, strategies)
    for result in results:
        met = targets(result.summary["sampling"])
        print(f"Targets, sampling, {result.name}: " + ", ".join(
            f"{name} {'met' if ok else 'MISSED'}" for name, ok in met.items()))
    if check is not None:
        print_check(check)
    if simulated:
        print_thresh(formula, simulated, installs)
    print(verdict)
    print(f"\nTime: {total['wall_s']:.1f} s wall, {total['cpu_s']:.1f} s CPU; baseline "
          f"({baseline['draws']:,} uniform draws) {baseline['wall_s']:.2f} s wall: "
          f"{output['time']['total_over_baseline_wall']:.0f}× the baseline (CPU "
          f"{output['time']['total_over_baseline_cpu']:.0f}×).")
    for name, phase in timer.phases.items():
        print(f"  {name}: {phase['wall_s']:.1f} s wall, {phase['cpu_s']:.1f} s CPU "
              f"({phase['wall_s'] / baseline['wall_s']:.1f}× the baseline)")
    if check is not None:
        simulated_s = sum(timer.phases[f"scenario: {r.name}"]["wall_s"] for r in results)
        print(f"  real client: {check['client_us_per_report_call']:.0f} µs per report() call "
              f"({check['client_report_calls']:,} calls); the simulator: "
              f"{simulated_s / (len(results) * installs * PERIODS) * 1e9:.1f} ns per "
              "install-day, all three strategies and their estimates included")
    print(f"Written to {args.out}; plots {', '.join(plots.values())}")
    return output


if __name__ == "__main__":
    main(sys.argv[1:])
