"""The central ε a shuffler adds to a plan over time (docs/shuffler.md, "Over a campaign's
horizon"): per period at the expected batch, case K over the horizon (r × per period), the
assumptions beside every figure, and no subsampling figure."""

from __future__ import annotations

import math

import pytest

from chorus_collector.design.amplification import (
    NOT_GIVEN,
    NUMERICAL_LIMIT,
    period_central,
    shuffled_plan,
)
from chorus_collector.design.designer import design
from chorus_collector.ingest.shuffling import central_privacy
from chorus_shared.schedule import schedule_from_json
from chorus_shared.shuffling import fmt_closed_form

DAILY = schedule_from_json({"cadence": "day", "start": "2026-01-01", "periods": 365}, 86400)
MONTH = schedule_from_json({"cadence": "day", "start": "2026-01-01", "periods": 30}, 86400)


def test_the_per_period_figure_is_longitudinal_3_1() -> None:
    """r = 4, ε₀ = 2, δ = 10⁻⁸ per batch: the FMT closed form at m_t = nπ."""
    one = period_central(2.0, 10_958, 1e-8)  # n = 10⁶, T = 365
    assert round(one["closed_form_epsilon"], 3) == 0.560
    assert one["closed_form_epsilon"] == fmt_closed_form(2.0, 10_958, 1e-8)
    # The collector's numerical bound is tighter (§3.1 quotes 0.191 from the authors' code;
    # ours sums the clone model exactly, MECHANISMS-2.md §5.1) and the figure is the smaller.
    assert one["numerical_epsilon"] < 0.191 and one["epsilon"] == one["numerical_epsilon"]
    assert one["bound"] == "numerical" and one["delta"] == 1e-8
    assert period_central(2.0, 133_333, 1e-8)["closed_form_epsilon"] == pytest.approx(
        0.189, abs=1e-3)  # T = 30
    # n = 10⁴, T = 30: outside the closed form's regime (ε₀ = 2 claims nothing).
    assert period_central(2.0, 1_333, 1e-8)["closed_form_epsilon"] == 2.0


def test_the_horizon_figure_is_r_times_the_period() -> None:
    plan = shuffled_plan(2.0, 10**6, 4, DAILY, 86400)
    assert plan["batch"] == 10_958 and plan["buckets_per_period"] == 1
    period, horizon = plan["period"], plan["horizon"]
    assert period == period_central(2.0, 10_958)
    assert period["delta"] == min(1 / 10_958**2, 1e-6)  # as the collector states estimates
    assert horizon["epsilon"] == 4 * period["epsilon"] and horizon["reports"] == 4
    assert horizon["delta"] == pytest.approx(4 * period["delta"])
    assert horizon["rule"].startswith("case K: r × the per-period figure")
    assert "valid even when the collector can tell who reported in which period" in \
        horizon["rule"]
    # The same ε as the estimates will state for such a batch.
    assert period["epsilon"] == central_privacy(2.0, 10_958)["epsilon"]


def test_every_figure_comes_with_its_assumptions() -> None:
    plan = shuffled_plan(2.0, 10**6, 4, MONTH, 86400)
    words = " ".join(plan["assumptions"])
    for needed in ("No injected reports", "do not collude", "same randomizer at the same ε₀ = 2",
                   "The local guarantee holds regardless", "r·ε₀ = 8"):
        assert needed in words
    assert plan["not_given"] == NOT_GIVEN
    assert "random allocation" in NOT_GIVEN and "not valid" in NOT_GIVEN
    assert plan["summary"].startswith("per day: ε = ")
    assert "case K, 4 × per day" in plan["summary"]


def test_finer_time_buckets_make_smaller_batches() -> None:
    """The shuffler batches one time bucket: hourly buckets split a day's reports in 24."""
    hourly = shuffled_plan(2.0, 10**6, 4, DAILY, 3600)
    assert hourly["buckets_per_period"] == 24 and hourly["batch"] == math.floor(10**6 * 4
                                                                                / 365 / 24)
    assert hourly["period"]["epsilon"] > shuffled_plan(2.0, 10**6, 4, DAILY,
                                                       86400)["period"]["epsilon"]
    words = " ".join(hourly["assumptions"])
    assert "the shuffler groups by bucket" in words
    assert "below the shuffler's default MIN_BATCH (1,000)" in words


def test_no_amplification_is_said_plainly() -> None:
    small = shuffled_plan(2.0, 10**4, 4, DAILY, 86400)  # m ≈ 109
    assert not small["period"]["amplified"] and small["period"]["epsilon"] > 0.99 * 2.0
    assert small["summary"].startswith("no amplification")
    assert small["horizon"]["epsilon"] > 0.99 * 8.0  # r·ε₀: the local guarantee, no more
    empty = shuffled_plan(2.0, 10, 1, DAILY, 86400)
    assert empty["batch"] == 0 and empty["period"] is None and "no amplification" in \
        empty["summary"]


def test_large_batches_get_the_closed_form_only() -> None:
    large = period_central(2.0, NUMERICAL_LIMIT + 1)
    assert large["numerical_epsilon"] is None and large["bound"] == "closed-form"
    assert large["epsilon"] == large["closed_form_epsilon"]


def test_the_designer_shows_it() -> None:
    result = design({"kind": "categories", "categories": ["no", "yes"], "installs": 10**6,
                     "privacy": {"budget": 8.0}, "time_precision": 86400,
                     "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 365}})
    assert result.plan is not None
    assert result.plan["shuffling"] == shuffled_plan(2.0, 10**6, 4, DAILY, 86400)
