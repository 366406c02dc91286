"""The designer's plan over time (docs/designing.md, "Over time"): the plan it describes is the
one the client follows, its standard errors are the exact ones of LONGITUDINAL.md §1.3–1.4,
its recommendation is the variance-optimal ε per report within the client's cap, and it warns
when periods would show nothing."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.optimize import minimize_scalar
from scipy.stats import binom

from chorus_client.plan import draw_plan
from chorus_client.policy import DEFAULT_LIFETIME_BUDGET, DEFAULT_MAX_EPSILON
from chorus_collector.cli import main
from chorus_collector.design.designer import CANDIDATES, design, spec
from chorus_collector.design.planning import (
    EXACT_COUNT_LIMIT,
    inverse_count,
    period_variance,
    plan_over_time,
    probability_below,
    probability_empty,
)
from chorus_collector.design.request import PER_REPORT_CAP, DesignRequest, recommended_plan
from chorus_collector.design.variances import split_variance
from chorus_shared.campaign import campaign_from_spec
from chorus_shared.domain import Categories, NumericRange, NumericVector, OpenStrings
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import REGISTRY
from chorus_shared.schedule import expected_inverse_count, sampled_variance

BINARY = {"kind": "categories", "categories": ["no", "yes"], "frequency": 0.3}
SIXTEEN = {"kind": "categories", "domain_size": 16, "frequency": 1 / 16}
MEANS = {"kind": "numeric", "lo": -1, "hi": 1}


def _request(base: dict[str, Any], installs: int, periods: int, budget: float = 8.0,
             **extra: Any) -> dict[str, Any]:
    return {**base, "installs": installs, "privacy": {"budget": budget},
            "schedule": {"cadence": "day", "start": "2026-01-01", "periods": periods}, **extra}


def _plan(base: dict[str, Any], mechanism: str, installs: int, periods: int,
          **extra: Any) -> dict[str, Any]:
    """The plan for one mechanism (the designer plans for the recommended one)."""
    request = DesignRequest.from_json(_request(base, installs, periods, **extra))
    campaign = campaign_from_spec(spec(request, mechanism, "x"), warn=False)
    return plan_over_time(request, campaign)


def _by_design(plan: dict[str, Any], design: str, epsilon: float | None = None
               ) -> dict[str, Any]:
    return next(o for o in plan["options"] if o["design"] == design
                and (epsilon is None or math.isclose(o["epsilon"], epsilon)))


# LONGITUDINAL.md §1.4's table: B = 8, exact E[1/m]; (mechanism, T, n, SE at r = 4, e = 2,
# SE splitting). Its n = 10⁴ rows of OUE and the means scale by √100.
LONGITUDINAL_TABLE = [
    (BINARY, "krr", 30, 10**4, 0.0165, 0.0374), (BINARY, "krr", 30, 10**6, 0.00165, 0.00374),
    (BINARY, "krr", 365, 10**4, 0.0598, 0.456), (BINARY, "krr", 365, 10**6, 0.00596, 0.0456),
    (SIXTEEN, "oue", 30, 10**4, 0.0251, 0.0748), (SIXTEEN, "oue", 30, 10**6, 0.00251, 0.00748),
    (SIXTEEN, "oue", 365, 10**4, 0.0882, 0.912), (SIXTEEN, "oue", 365, 10**6, 0.00878, 0.0912),
    (SIXTEEN, "krr", 365, 10**6, 0.00810, 0.175),
    (MEANS, "duchi", 30, 10**6, 0.00355, 0.00752), (MEANS, "duchi", 365, 10**6, 0.0125, 0.0913),
]


@pytest.mark.parametrize(("base", "mechanism", "periods", "installs", "sampled", "split"),
                         LONGITUDINAL_TABLE)
def test_the_table_reproduces_longitudinal_1_4(base: dict[str, Any], mechanism: str,
                                               periods: int, installs: int, sampled: float,
                                               split: float) -> None:
    plan = _plan(base, mechanism, installs, periods)
    chosen = next(o for o in plan["options"] if o["chosen"])
    assert (chosen["epsilon"], chosen["reports_per_install"]) == (2.0, 4)
    splitting = _by_design(plan, "splitting")
    assert splitting["epsilon"] == pytest.approx(8 / periods)
    assert splitting["reports_per_install"] == periods
    if base is MEANS:
        # The designer's mean is the worst case over [−1, 1]: the same v̄ + S² = C² as the
        # table's uniform values, but S² = 0 (all at 0) subtracts no S²/n, so it is at least
        # the table's figure and within the S²/n it leaves out.
        assert sampled <= chosen["std_error"] * (1 + 1e-3) < sampled * 1.015
        assert split <= splitting["std_error"] * (1 + 1e-3) < split * 1.015
        return
    assert chosen["std_error"] == pytest.approx(sampled, rel=6e-3)  # three digits quoted
    assert splitting["std_error"] == pytest.approx(split, rel=6e-3)


def test_each_row_is_the_exact_formula() -> None:
    """SE = scale·√((v̄ + S²)·E[1/m | m ≥ 1] − S²/n), expected reports n·r/T,
    P(empty) = (1 − r/T)^n, P(< min batch) the binomial's CDF; splitting is v̄/n."""
    installs, periods = 5000, 30
    plan = _plan({**BINARY, "frequency": 0.2}, "krr", installs, periods, min_batch_size=700)
    for option in plan["options"]:
        reports, epsilon = option["reports_per_install"], option["epsilon"]
        mechanism = REGISTRY["krr"].resolve(epsilon=epsilon, domain=Categories(("no", "yes")),
                                            params={})
        per_report, spread = split_variance(mechanism, 0.2) or (math.nan, math.nan)
        p, q = mechanism.support_probabilities()
        assert per_report == pytest.approx(q * (1 - q) / (p - q) ** 2)  # binary: any value
        exact = sampled_variance(per_report, spread * installs / (installs - 1), installs,
                                 reports / periods)
        assert option["std_error"] == pytest.approx(math.sqrt(exact), rel=1e-12)
        assert option["expected_reports_per_period"] == pytest.approx(installs * reports
                                                                      / periods)
        assert option["p_empty"] == pytest.approx((1 - reports / periods) ** installs,
                                                  rel=1e-9, abs=1e-300)
        assert option["p_below_min_batch"] == pytest.approx(
            binom.cdf(699, installs, reports / periods), rel=1e-6, abs=1e-15)
        if option["design"] == "splitting":  # everyone reports: only the mechanism's noise
            assert option["std_error"] == pytest.approx(math.sqrt(per_report / installs))


def test_expected_inverse_count_switches_to_its_series_seamlessly() -> None:
    probability = 0.25
    n = int(EXACT_COUNT_LIMIT / probability)
    exact = expected_inverse_count(n, probability)
    assert inverse_count(n + 1, probability) == pytest.approx(exact, rel=1e-6)
    assert inverse_count(n, probability) == exact
    assert period_variance(1.0, 0.2, n, probability) == pytest.approx(
        sampled_variance(1.0, 0.2 * n / (n - 1), n, probability), rel=1e-12)
    assert probability_empty(10, 1.0) == 0.0 and probability_below(10, 1.0, 11) == 1.0
    assert probability_below(10**6, 0.5, 10**6) is None  # too many terms to sum


@pytest.mark.parametrize(("budget", "periods", "expected"), [
    (8.0, 365, (2.0, 4)), (3.0, 365, (1.5, 2)), (1.0, 365, (1.0, 1)), (0.6, 30, (0.6, 1)),
    (8.0, 3, (2.0, 3)), (9.0, 365, (1.8, 5)), (2.0, 1, (2.0, 1))])
def test_the_recommendation_spends_the_share_at_the_cap(budget: float, periods: int,
                                                        expected: tuple[float, int]) -> None:
    """r = ⌈B/2⌉ reports (at most one per period), each at B/r ≤ 2: the whole share is used
    unless the periods run out."""
    epsilon, reports = recommended_plan(budget, periods)
    assert epsilon == pytest.approx(expected[0]) and reports == expected[1]
    assert PER_REPORT_CAP == DEFAULT_MAX_EPSILON == 2.0


def _optimum(name: str, domain: Any, frequency: float | None) -> float:
    """The ε minimising ε·(v̄_ε + S²), the variance per unit of budget."""
    def per_budget(epsilon: float) -> float:
        mechanism = REGISTRY[name].resolve(epsilon=epsilon, domain=domain, params={})
        parts = split_variance(mechanism, frequency)
        assert parts is not None
        return epsilon * sum(parts)

    return float(minimize_scalar(per_budget, bounds=(0.3, 12.0), method="bounded",
                                 options={"xatol": 1e-3}).x)


def _predictable() -> list[tuple[str, Any, float | None]]:
    cases: list[tuple[str, Any, float | None]] = []
    for size in (2, 3, 16, 256):
        domain = Categories(tuple(f"v{i}" for i in range(size)))
        for name in CANDIDATES["categories"]:
            cases += [(name, domain, f) for f in (0.001, 0.1, 0.25, 0.5, 0.9, 1.0)]
    for name in CANDIDATES["strings"]:
        try:
            mechanism = REGISTRY[name].resolve(epsilon=2.0, domain=OpenStrings(), params={})
        except CampaignError:  # the designer's strings domain does not suit it (discovery)
            continue
        if split_variance(mechanism, 0.1) is not None:
            cases += [(name, OpenStrings(), f) for f in (0.001, 0.1, 0.5, 0.9)]
    cases += [(name, NumericRange(-1, 1), None) for name in CANDIDATES["numeric"]]
    vector = NumericVector(("a", "b", "c"), (NumericRange(-1, 1),) * 3)
    cases += [(name, vector, None) for name in CANDIDATES["vector"]]
    return cases


def test_the_optimal_epsilon_is_above_the_cap_for_every_mechanism_but_one_corner() -> None:
    """Every mechanism whose variance the designer predicts, at every share (means: at the
    worst case), has its optimum above 2, except dbitflip for a category held by more than
    0.29 to 0.36 of the installs: the designer's text says exactly this."""
    below = [(name, frequency) for name, domain, frequency in _predictable()
             if _optimum(name, domain, frequency) <= DEFAULT_MAX_EPSILON]
    assert sorted(set(below)) == [("dbitflip", 0.5), ("dbitflip", 0.9), ("dbitflip", 1.0)]
    for size, threshold in ((2, 0.359), (16, 0.300), (256, 0.295)):
        domain = Categories(tuple(f"v{i}" for i in range(size)))
        assert _optimum("dbitflip", domain, threshold - 0.01) > DEFAULT_MAX_EPSILON
        assert _optimum("dbitflip", domain, threshold + 0.01) < DEFAULT_MAX_EPSILON
    plan = design(_request(BINARY, 10**6, 365)).plan
    assert plan is not None and "except dbitflip for a category held by more than about " \
        "0.3 of the installs" in plan["optimum"]


@pytest.mark.parametrize(("base", "mechanism"), [(BINARY, "krr"), (SIXTEEN, "oue"),
                                                 (SIXTEEN, "olh"), (MEANS, "duchi"),
                                                 (MEANS, "pm")])
def test_the_best_plan_does_not_depend_on_installs_horizon_or_budget(
        base: dict[str, Any], mechanism: str) -> None:
    """The smallest SE of the table is at the cap, whatever n, T and B (even shares)."""
    for installs in (10**4, 10**6, 10**8):
        for periods in (30, 365):
            for budget in (4.0, 8.0):
                plan = _plan(base, mechanism, installs, periods, budget=budget)
                best = min((o for o in plan["options"] if o["std_error"] is not None),
                           key=lambda o: o["std_error"])
                assert best["epsilon"] == 2.0 and best["recommended"]
                assert plan["recommended_epsilon"] == 2.0
                assert plan["recommended_reports"] == budget / 2


def test_the_corner_gets_its_own_recommendation() -> None:
    """dbitflip at a common category: fewer, weaker reports do better, and the table says so
    instead of asserting the cap."""
    plan = _plan({**SIXTEEN, "frequency": 0.5}, "dbitflip", 10**6, 365)
    assert plan["recommended_epsilon"] < 2.0
    best = min(plan["options"], key=lambda o: o["std_error"])
    assert best["recommended"] and best["epsilon"] == plan["recommended_epsilon"]
    assert plan["recommended_reports"] * plan["recommended_epsilon"] == pytest.approx(8.0)
    assert any("below the cap" in note for note in plan["notes"])


def test_the_plan_is_the_one_the_client_draws() -> None:
    """The campaign the designer creates makes the client draw r periods at ε each, r the
    designer's; its words are the campaign's own (``Campaign.reporting``)."""
    body = _request(BINARY, 10**6, 365)
    result = design(body)
    assert result.plan is not None
    definition = spec(body, result.recommended, "planned")
    assert definition["schedule"] == {"cadence": "day", "start": "2026-01-01", "periods": 365}
    campaign = campaign_from_spec(definition)
    row = draw_plan(campaign, pool="pinned", budget=8.0, now=campaign.schedule.start,  # type: ignore[union-attr]
                    rng=random.Random(1), spent=0.0, reserved=0.0)
    assert (row.epsilon, row.reports) == (2.0, 4) and row.slots is not None
    assert len(row.slots) == result.plan["reports_per_install"] == 4
    assert result.plan["reporting"] == campaign.reporting
    assert result.privacy["summary"] == campaign.reporting
    assert result.plan["estimand"].endswith(
        "among the installs active in that day (each reports in it with probability r/T = "
        "4/365; installs that arrive late or leave are counted in the periods they are "
        "active)")
    # The mechanism table is for one period: the reports a day expects.
    assert result.request.users == round(10**6 * 4 / 365)


def test_sparse_plans_are_warned_about() -> None:
    plan = _plan(BINARY, "krr", 2000, 365)  # 22 reports a day, often none below 100
    chosen = next(o for o in plan["options"] if o["chosen"])
    assert chosen["expected_reports_per_period"] == pytest.approx(2000 * 4 / 365)
    assert any("fewer than the campaign's min_batch_size (100)" in w for w in plan["warnings"])
    tiny = _plan(BINARY, "krr", 200, 365)  # P(empty) = (1 − 4/365)^200 ≈ 11%
    assert any(w.startswith("11.0% of the days are expected to have no report at all")
               for w in tiny["warnings"])
    some = _plan(BINARY, "krr", 10_000, 365)  # 110 expected: a fair share below 100
    assert any("fewer reports than min_batch_size (100) and will show no estimate" in w
               for w in some["warnings"])
    assert _plan(BINARY, "krr", 10**6, 365)["warnings"] == []
    greedy = _plan(BINARY, "krr", 10**6, 365, budget=12.0)
    assert any(f"default lifetime budget ({DEFAULT_LIFETIME_BUDGET:g}" in w
               for w in greedy["warnings"])
    loud = _plan(BINARY, "krr", 10**6, 365, epsilon=4.0)
    assert any("above the client's default max_epsilon (2)" in w for w in loud["warnings"])
    assert next(o for o in loud["options"] if o["chosen"])["epsilon"] == 4.0


@pytest.mark.parametrize(("body", "message"), [
    ({"schedule": {"cadence": "day", "start": "2026-01-01"}}, "needs installs"),
    ({"installs": 100}, "needs schedule"),
    ({"installs": 100, "schedule": {"cadence": "day", "start": "2026-01-01"},
      "privacy": None}, "privacy.budget"),
    ({"installs": 100, "schedule": {"cadence": "day", "start": "2026-01-01"},
      "privacy": {"unit": "day", "budget": 8.0}}, "privacy.unit must be 'lifetime'"),
    ({"installs": 0, "schedule": {"cadence": "day", "start": "2026-01-01"},
      "privacy": {"budget": 8.0}}, "installs must be an integer"),
    ({"installs": 100, "schedule": {"cadence": "month", "start": "2026-01-01"},
      "privacy": {"budget": 8.0}}, "schedule.cadence must be one of"),
])
def test_a_bad_plan_is_refused_clearly(body: dict[str, Any], message: str) -> None:
    with pytest.raises(CampaignError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DesignRequest.from_json({**BINARY, **{k: v for k, v in body.items() if v is not None}})


def test_the_request_round_trips_with_its_plan() -> None:
    request = DesignRequest.from_json(_request(BINARY, 10**6, 365, min_batch_size=50))
    assert request.epsilon == 2.0 and request.users == 10959 and request.min_batch_size == 50
    assert DesignRequest.from_json(request.to_json()) == request
    assert spec(request, "krr", "x")["min_batch_size"] == 50


def test_the_cli_prints_the_plan() -> None:
    result = CliRunner().invoke(main, [
        "design", "--kind", "categories", "--categories", "no,yes", "--frequency", "0.3",
        "--installs", "1000000", "--cadence", "day", "--start", "2026-01-01",
        "--periods", "365", "--budget", "8", "--time-precision", "86400"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    recommended = next(line for line in lines if line.endswith("← recommended, planned"))
    assert recommended.split()[:3] == ["2", "sampling", "4"] and "0.005956" in recommended
    splitting = next(line for line in lines if " splitting " in line)
    assert splitting.split()[2] == "365" and "0.04562" in splitting
    assert "planned: 4 reports per install over 365 days" in result.output
    assert "does not depend on the number of installs, the horizon or the budget" in \
        result.output
    assert "with a shuffler: per day: ε = 0.189" in result.output
    assert "case K, 4 × per day" in result.output and "not given: " in result.output
    as_json = CliRunner().invoke(main, [
        "design", "--kind", "numeric", "--range", "0,10", "--installs", "5000", "--cadence",
        "week", "--start", "2026-01-05", "--end", "2026-12-31", "--budget", "8", "--format",
        "json"])
    assert as_json.exit_code == 0, as_json.output
    plan = json.loads(as_json.output)["design"]["plan"]
    assert plan["periods"] == 52 and plan["cadence"] == "week"
    assert plan["shuffling"]["buckets_per_period"] == 7 * 24  # hourly buckets by default


@pytest.mark.parametrize(("args", "message"), [
    ([], "give --epsilon"),
    (["--epsilon", "1"], "give --users"),
    (["--cadence", "day", "--start", "2026-01-01", "--budget", "8"], "needs installs"),
])
def test_the_cli_says_what_is_missing_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["design", "--kind", "categories", "--categories",
                                       "a,b", *args])
    assert result.exit_code == 1 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_design_with_a_plan_is_json() -> None:
    body = design(_request(SIXTEEN, 300, 30)).to_json()
    assert json.loads(json.dumps(body, allow_nan=False))["plan"]["installs"] == 300
    assert np.isfinite([o["p_empty"] for o in body["plan"]["options"]]).all()


def test_the_table_in_docs_designing_is_computed() -> None:
    """docs/designing.md's table: n = 10⁶, a year of days, a share of 8, binary at 0.3."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "designing.md").read_text()
    section = page.split("## Over time", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")
            and not line.startswith("| ε per report")]
    plan = design(_request(BINARY, 10**6, 365)).plan
    assert plan is not None and len(rows) == len(plan["options"]) == 5
    for row, option in zip(rows, plan["options"], strict=True):
        cells = [cell.strip().strip("*") for cell in row.strip("|").split("|")]
        assert cells[0] == f"{option['epsilon']:.3g}"
        assert cells[1].split(" (")[0] == option["design"]
        assert option["recommended"] == ("recommended" in cells[1])
        assert cells[2] == str(option["reports_per_install"])
        assert cells[3] == f"{option['expected_reports_per_period']:,.0f}"
        assert cells[4] == f"{option['std_error']:.3g}"
