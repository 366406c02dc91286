"""A campaign's calendar and the sampling arithmetic behind planned reports
(``chorus_shared.schedule``; ../shared/docs/LONGITUDINAL.md §1.3)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from chorus_shared import campaign_from_spec
from chorus_shared.errors import CampaignError
from chorus_shared.schedule import (
    Schedule,
    draw_periods,
    expected_inverse_count,
    sampled_variance,
    schedule_from_json,
)

JAN_1 = 1_767_225_600  # 2026-01-01T00:00:00Z


def test_a_schedule_is_read_from_a_start_and_an_end_or_a_count_or_a_year() -> None:
    by_end = schedule_from_json({"cadence": "day", "start": "2026-01-01", "end": "2026-03-31"},
                                3600)
    assert by_end == Schedule("day", JAN_1, 90)
    assert by_end.to_json() == {"cadence": "day", "start": "2026-01-01", "periods": 90}
    assert schedule_from_json({"start": "2026-01-01"}, 3600) == Schedule("day", JAN_1, 365)
    weekly = schedule_from_json({"cadence": "week", "start": "2026-01-01"}, 86400)
    assert weekly is not None and weekly.periods == 52 and weekly.end == JAN_1 + 52 * 7 * 86400
    assert [by_end.index(JAN_1 - 1), by_end.index(JAN_1), by_end.index(JAN_1 + 86400 * 90)] \
        == [-1, 0, 90]
    assert by_end.date(31) == "2026-02-01"
    assert schedule_from_json(None, 3600) is None


@pytest.mark.parametrize(("schedule", "precision", "message"), [
    ({"cadence": "month", "start": "2026-01-01"}, 3600, "cadence must be one of"),
    ({"start": "2026-1-1"}, 3600, "UTC date"),
    ({"start": "20260101"}, 3600, "YYYY-MM-DD"),
    ({"start": "yesterday"}, 3600, "UTC date"),
    ({"start": 1767225600}, 3600, "UTC date"),
    ({"start": "2026-01-01", "periods": 0}, 3600, r"periods must be an integer in \[1, 3660\]"),
    ({"start": "2026-01-01", "periods": 10, "end": "2026-02-01"}, 3600, "not both"),
    ({"start": "2026-02-01", "end": "2026-01-01"}, 3600, "before schedule.start"),
    ({"start": "2026-01-01"}, 7 * 3600, "must divide one day"),
    ({"start": "2026-01-01", "every": 2}, 3600, "unknown schedule fields"),
    ({"cadence": "week", "start": "2026-01-05"}, 604800, "multiple of time_precision"),
    ("daily", 3600, "must be an object"),
])
def test_a_bad_schedule_is_refused_with_a_clear_message(schedule: object, precision: int,
                                                        message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        schedule_from_json(schedule, precision)


def test_a_scheduled_campaign_is_a_lifetime_plan_and_says_so_in_words() -> None:
    spec = {"name": "daily", "mechanism": "rr", "epsilon": 2.0, "domain": ["no", "yes"],
            "privacy": {"budget": 8.0},
            "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 365}}
    campaign = campaign_from_spec(spec)
    assert campaign.reports_per_install == 4
    assert campaign.reporting.startswith("4 reports per install over 365 days from "
                                         "2026-01-01 to 2026-12-31, in days drawn at random")
    assert campaign.public_config()["worst_case"]["reporting"] == campaign.reporting
    with pytest.raises(CampaignError, match=r"privacy\.unit must be 'lifetime'"):
        campaign_from_spec({**spec, "privacy": {"unit": "day", "budget": 2.0}})
    plain = campaign_from_spec({**spec, "schedule": None})
    assert "reporting" not in plain.public_config()["worst_case"]  # unchanged for old clients


def test_the_draw_is_a_uniform_subset() -> None:
    """Every one of the C(6, 2) = 15 pairs of 6 periods equally likely (χ²)."""
    rng = random.Random(3)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(15_000):
        pair = draw_periods(rng, 2, 6)
        counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 15
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    with pytest.raises(ValueError, match="cannot draw 5 of 4"):
        draw_periods(rng, 5, 4)


@pytest.mark.parametrize(("n", "p"), [(1, 0.5), (7, 0.3), (200, 0.02), (2000, 4 / 30)])
def test_expected_inverse_count_is_the_exact_sum(n: int, p: float) -> None:
    m = np.arange(1, n + 1)
    pmf = stats.binom.pmf(m, n, p)
    exact = float(np.sum(pmf / m) / (1 - stats.binom.pmf(0, n, p)))
    assert expected_inverse_count(n, p) == pytest.approx(exact, rel=1e-12)
    assert expected_inverse_count(10, 1.0) == pytest.approx(0.1)


def test_expected_inverse_count_for_huge_populations_is_the_series() -> None:
    """Above 10⁷ expected reports the sum is replaced by its expansion: both agree where
    both are cheap, and a population of 10¹² is answered at once."""
    n, p = 2 * 10**7, 0.6
    summed = expected_inverse_count(n, p)  # mean 1.2·10⁷: the expansion
    direct = expected_inverse_count(n // 4, p) / 4  # mean 3·10⁶: the sum; E[1/m] ≈ 1/(np)
    assert summed == pytest.approx(direct, rel=1e-6)
    assert expected_inverse_count(10**12, 0.01) == pytest.approx(1e-10, rel=1e-9)


def test_the_sampled_variance_is_what_a_simulation_of_the_schedule_gives() -> None:
    """LONGITUDINAL.md §1.3's check: N = 2000 installs, T = 30, r = 4, ε = 2, θ = 0.3; each
    replicate draws every install's 4 periods and randomizes its bit; period 0's mean of
    debiased reports. The mean is θ and the variance the formula, within their sampling
    error (4,000 replicates)."""
    rng = np.random.default_rng(11)
    n, periods, reports, epsilon, replicates = 2000, 30, 4, 2.0, 4000
    values = np.zeros(n, dtype=bool)
    values[:600] = True  # θ = 0.3 exactly
    p = math.exp(epsilon) / (math.exp(epsilon) + 1)
    estimates = np.empty(replicates)
    for k in range(replicates):
        # An install reports in period 0 when 0 is among its 4 of 30: probability 4/30, the
        # installs independent (the only part of the draw period 0 depends on).
        sampled = rng.random(n) < reports / periods
        truth = values[sampled]
        kept = rng.random(truth.size) < p
        reported = np.where(kept, truth, ~truth)
        estimates[k] = (reported.mean() - (1 - p)) / (2 * p - 1)
    per_report = math.exp(epsilon) / (math.exp(epsilon) - 1) ** 2
    spread = 0.3 * 0.7 * n / (n - 1)
    variance = sampled_variance(per_report, spread, n, reports / periods)
    assert abs(estimates.mean() - 0.3) < 4 * math.sqrt(variance / replicates)
    ratio = estimates.var(ddof=1) / variance
    # (R − 1)·s²/σ² ~ χ²(R − 1) for near-normal estimates: a two-sided 1e-3 band.
    low, high = stats.chi2.ppf([5e-4, 1 - 5e-4], replicates - 1) / (replicates - 1)
    assert low < ratio < high
