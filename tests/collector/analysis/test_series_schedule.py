"""A campaign with a schedule is asked per period by default (docs/campaigns.md, "Over
time"): one point per period of its cadence from its start, every period of the horizon up to
now, empty ones kept and said to be empty; every series and estimate says what it estimates.
Campaigns without a schedule keep their time buckets and say nothing more."""

from __future__ import annotations

import random
from typing import Any

import pytest
from flask.testing import FlaskClient

from chorus_collector.analysis.periods import describe_window, horizon_window
from chorus_shared.campaign import campaign_from_config, campaign_from_spec
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, NOW, FakeClock, make_report

DAY = 86400
T0 = int(NOW)  # 2026-01-01T00:00:00Z, a Thursday
# Reports per day from the start: day 2 has none, day 4 too few.
PER_DAY = [30, 25, 0, 40, 3]
MIN_BATCH = 10


def _create(http: FlaskClient, name: str, **extra: Any) -> dict[str, Any]:
    spec = {"name": name, "mechanism": "krr", "epsilon": 2.0, "domain": ["a", "b", "c"],
            "min_batch_size": MIN_BATCH, "time_precision": 3600,
            "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 30},
            "privacy": {"budget": 8.0}, **extra}
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def _send(http: FlaskClient, config: dict[str, Any], per_day: list[int],
          seconds: int = DAY) -> None:
    rng = random.Random(5)
    reports = [make_report(config, rng.choice("aab"), rng, now=NOW + day * seconds + 7200)
               for day, count in enumerate(per_day) for _ in range(count)]
    reply = http.post(f"/v1/campaigns/{config['name']}/reports", json={"reports": reports})
    assert reply.status_code == 200
    assert all(r["status"] == "accepted" for r in reply.get_json()["results"])


def _get(http: FlaskClient, path: str, **query: Any) -> dict[str, Any]:
    reply = http.get(path, query_string=query, headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def test_a_scheduled_series_has_a_point_for_every_period_up_to_now(
        http: FlaskClient, clock: FakeClock) -> None:
    config = _create(http, "daily")
    clock.now = NOW + 6 * DAY + 3600  # in day 6 (0-based): days 0 to 6 are shown
    _send(http, config, PER_DAY)
    body = _get(http, "/v1/campaigns/daily/series", value="a")
    assert body["step_name"] == "period" and body["step"] == DAY
    assert body["window"] == {"start": T0, "end": T0 + 7 * DAY}
    points = body["series"][0]["points"]
    assert [p["start"] for p in points] == [T0 + day * DAY for day in range(7)]
    assert [p["n"] for p in points] == [*PER_DAY, 0, 0]
    # Empty and thin periods are there, without an estimate, and say why.
    for day in (2, 5, 6):
        assert points[day]["suppressed"] and points[day]["estimate"] is None
        assert points[day]["reason"] == "no reports in this interval"
    assert points[4]["suppressed"] and "fewer than the campaign's min_batch_size" in \
        points[4]["reason"]
    assert not points[0]["suppressed"] and points[0]["estimate"] is not None
    # What each point estimates, with the design's r/T, and the calendar in words.
    assert body["estimand"].startswith("each point: each value's share among the installs "
                                       "active in that day")
    assert "probability r/T = 4/30" in body["estimand"]
    assert body["schedule"]["periods"] == 30 and body["schedule"]["start"] == "2026-01-01"
    assert body["schedule"]["reporting"].startswith("4 reports per install over 30 days")
    assert "E[1/m]" in body["variance_model"]
    # Each point is still the estimates route's answer for its day, which says the same.
    estimate = _get(http, "/v1/campaigns/daily/estimates", start=T0, end=T0 + DAY)
    row = next(r for r in estimate["rows"] if r["value"] == "a")
    assert row["frequency"] == points[0]["estimate"]
    assert estimate["estimand"].startswith("each value's share among the installs active in "
                                           "the day from 2026-01-01")


def test_the_horizon_bounds_the_default_window(http: FlaskClient, clock: FakeClock) -> None:
    config = _create(http, "short", schedule={"cadence": "day", "start": "2026-01-01",
                                              "periods": 3})
    clock.now = NOW + 10 * DAY  # after the horizon: its 3 days, no more
    _send(http, config, PER_DAY[:3])
    body = _get(http, "/v1/campaigns/short/series")
    assert body["window"] == {"start": T0, "end": T0 + 3 * DAY}
    assert [p["n"] for p in body["series"][0]["points"]] == PER_DAY[:3]
    clock.now = NOW - DAY  # before the start: nothing yet
    assert _get(http, "/v1/campaigns/short/series")["series"][0]["points"] == []
    # Other steps and explicit windows still answer as for any campaign.
    hourly = _get(http, "/v1/campaigns/short/series", step="bucket")
    assert hourly["step_name"] == "bucket" and "not the campaign's days" in hourly["estimand"]
    explicit = _get(http, "/v1/campaigns/short/series", start=T0 + DAY, end=T0 + 2 * DAY)
    assert explicit["window"] == {"start": T0 + DAY, "end": T0 + 2 * DAY}


def test_weekly_periods_start_on_the_campaign_start(http: FlaskClient,
                                                    clock: FakeClock) -> None:
    """2026-01-01 is a Thursday: the campaign's weeks run Thursday to Wednesday, not as ISO
    weeks (step=week) do."""
    config = _create(http, "weekly", time_precision=86400,
                     schedule={"cadence": "week", "start": "2026-01-01", "periods": 10})
    clock.now = NOW + 15 * DAY
    _send(http, config, [20, 20], seconds=7 * DAY)
    body = _get(http, "/v1/campaigns/weekly/series")
    assert [p["start"] for p in body["series"][0]["points"]] == [T0, T0 + 7 * DAY,
                                                                  T0 + 14 * DAY]
    assert [p["n"] for p in body["series"][0]["points"]] == [20, 20, 0]
    iso = _get(http, "/v1/campaigns/weekly/series", step="week")
    assert iso["series"][0]["points"][0]["start"] == T0 - 3 * DAY  # Monday 2025-12-29
    several = _get(http, "/v1/campaigns/weekly/estimates", start=T0, end=T0 + 14 * DAY)
    assert several["estimand"].startswith("pooled over the reports of the window")
    change = _get(http, "/v1/campaigns/weekly/compare", baseline_start=T0,
                  baseline_end=T0 + 7 * DAY, start=T0 + 7 * DAY, end=T0 + 14 * DAY)
    assert change["estimand"]["baseline"].startswith("each value's share among the installs "
                                                     "active in the week from 2026-01-01")
    assert "the week from 2026-01-08" in change["estimand"]["current"]


def test_campaigns_without_a_schedule_are_unchanged(http: FlaskClient,
                                                    clock: FakeClock) -> None:
    spec = {"name": "plain", "mechanism": "krr", "epsilon": 2.0, "domain": ["a", "b"],
            "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    clock.now = NOW + 2 * DAY
    _send(http, config, [5, 5])
    body = _get(http, "/v1/campaigns/plain/series")
    assert body["step_name"] == "bucket" and "estimand" not in body and "schedule" not in body
    assert "estimand" not in _get(http, "/v1/campaigns/plain/estimates")
    assert "estimand" not in _get(http, "/v1/campaigns/plain/compare",
                                  baseline_start=T0, baseline_end=T0 + DAY, start=T0 + DAY,
                                  end=T0 + 2 * DAY)
    reply = http.get("/v1/campaigns/plain/series?step=period", headers=ANALYST_HEADERS)
    assert reply.status_code == 400 and reply.mimetype == "application/problem+json"
    assert "has none" in reply.get_json()["detail"]


def test_the_api_shows_how_one_install_reports_beside_the_config(http: FlaskClient) -> None:
    """Listed and retired campaigns say it; the config clients verify gains no field."""
    config = _create(http, "said")
    listed = http.get("/v1/campaigns", headers=ADMIN_HEADERS).get_json()["campaigns"]
    campaign = campaign_from_config(config)
    assert listed[0]["reporting"] == campaign.reporting
    assert listed[0]["reporting"].startswith("4 reports per install over 30 days from "
                                             "2026-01-01 to 2026-01-30")
    public = http.get("/v1/campaigns/said").get_json()
    assert "reporting" not in public and public["worst_case"]["reporting"] == campaign.reporting
    assert campaign_from_config(public).digest == config["digest"]
    retired = http.post("/v1/campaigns/said/retire", headers=ADMIN_HEADERS).get_json()
    assert retired["reporting"] == campaign.reporting


@pytest.mark.parametrize(("now", "expected"), [
    (NOW - 1, (T0, T0)), (NOW, (T0, T0 + DAY)), (NOW + 40 * DAY, (T0, T0 + 30 * DAY))])
def test_horizon_window(now: float, expected: tuple[int, int]) -> None:
    campaign = campaign_from_spec({"name": "x", "mechanism": "krr", "epsilon": 2.0,
                                   "domain": ["a", "b"], "privacy": {"budget": 8.0},
                                   "schedule": {"cadence": "day", "start": "2026-01-01",
                                                "periods": 30}})
    assert campaign.schedule is not None
    assert horizon_window(campaign.schedule, now) == expected
    assert describe_window(campaign, None, None) is not None


def test_a_long_horizon_shows_its_last_thousand_periods() -> None:
    campaign = campaign_from_spec({"name": "x", "mechanism": "krr", "epsilon": 2.0,
                                   "domain": ["a", "b"], "privacy": {"budget": 8.0},
                                   "schedule": {"cadence": "day", "start": "2026-01-01",
                                                "periods": 3000}})
    assert campaign.schedule is not None
    start, end = horizon_window(campaign.schedule, NOW + 1500 * DAY)
    assert (end - start) // DAY == 1000 and end == T0 + 1501 * DAY


@pytest.mark.parametrize(("schedule", "extra", "message"), [
    ({"cadence": "day", "start": "2026-01-01"}, {"time_precision": 5000},
     "time_precision (5000 s) must divide one day"),
    ({"cadence": "day", "start": "2026-01-01"}, {"privacy": {"unit": "day"}},
     "its privacy.unit must be 'lifetime'"),
])
def test_a_schedule_the_collector_refuses(http: FlaskClient, schedule: dict[str, Any],
                                          extra: dict[str, Any], message: str) -> None:
    """docs/campaigns.md, "Over time": periods must hold whole buckets, and the budget is a
    lifetime one."""
    spec = {"name": "bad", "mechanism": "krr", "epsilon": 2.0, "domain": ["a", "b"],
            "schedule": schedule, **extra}
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 400 and reply.mimetype == "application/problem+json"
    assert message in reply.get_json()["detail"]


def test_a_schedule_by_its_end_or_a_year_by_default(http: FlaskClient) -> None:
    by_end = _create(http, "by-end", schedule={"cadence": "week", "start": "2026-01-01",
                                               "end": "2026-03-31"}, time_precision=86400)
    assert by_end["schedule"] == {"cadence": "week", "start": "2026-01-01", "periods": 13}
    year = _create(http, "year", schedule={"cadence": "day", "start": "2026-01-01"})
    assert year["schedule"]["periods"] == 365


def test_the_csv_of_a_scheduled_series_is_the_usual_table(http: FlaskClient,
                                                          clock: FakeClock) -> None:
    config = _create(http, "csv")
    clock.now = NOW + DAY
    _send(http, config, [20])
    reply = http.get("/v1/campaigns/csv/series?format=csv&value=a", headers=ANALYST_HEADERS)
    assert reply.mimetype == "text/csv"
    lines = reply.get_data(as_text=True).splitlines()
    assert lines[0] == ("value,start,end,start_iso,n,estimate,std_error,ci_low,ci_high,"
                        "suppressed,epsilon")
    assert len(lines) == 3  # days 0 and 1 (the current one)
