"""Time series (GET|POST /v1/campaigns/<name>/series, ``analysis.estimate_series``): every
point is the estimates route's answer for the point's interval, folded or not; points below
the campaign's min_batch_size are suppressed; steps are aligned to the time precision, days
to 00:00 UTC and weeks to Monday; bad questions are 4xx problems."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.analysis import MAX_POINTS, estimate_series
from chorus_collector.jobs.folding import fold
from chorus_collector.problems import Problem
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    campaign_spec,
    make_report,
)

HOUR = 3600
T0 = int(NOW)  # 2026-01-01T00:00:00Z, a Thursday
CANDIDATES = ["https://a.example/", "https://b.example/", "https://c.example/"]
VECTOR = {"kind": "vector", "attributes": [{"name": "cpu", "lo": 0, "hi": 100},
                                           {"name": "memory", "lo": 0, "hi": 16}]}
SPECS: dict[str, dict[str, Any]] = {
    "krr": {"mechanism": "krr"},
    "duchi": {"mechanism": "duchi"},
    "duchi_md": {"mechanism": "duchi_md", "epsilon": 2.0, "domain": VECTOR},
    "rappor": {"mechanism": "rappor"},
}
# Reports per hour after NOW: a gap (hour 2), a few below min_batch_size (hour 4).
PER_HOUR = [40, 25, 0, 30, 3, 35]
MIN_BATCH = 5


def _value(name: str, rng: random.Random) -> Any:
    if name == "krr":
        return rng.choice("aabbbcd")
    if name == "duchi":
        return rng.uniform(20, 90)
    if name == "duchi_md":
        return {"cpu": rng.uniform(0, 100), "memory": rng.uniform(2, 8)}
    return rng.choice(CANDIDATES[:2])


def _send(http: FlaskClient, clock: FakeClock, config: dict[str, Any], name: str,
          hours: list[int], rng: random.Random) -> None:
    clock.now = NOW + len(PER_HOUR) * HOUR
    reports = [make_report(config, _value(name, rng), rng, now=NOW + hour * HOUR)
               for hour, count in enumerate(PER_HOUR) if hour in hours for _ in range(count)]
    reply = http.post(f"/v1/campaigns/{config['name']}/reports", json={"reports": reports})
    assert reply.status_code == 200, reply.get_json()


@pytest.fixture
def filled(app: Flask, http: FlaskClient, clock: FakeClock,
           ) -> Callable[[str], dict[str, Any]]:
    """A campaign with reports in hours 0-5 after NOW: hours 0-2 folded, the rest not."""

    def make(name: str) -> dict[str, Any]:
        spec = {**campaign_spec(name.replace("_", "-"), mechanism="duchi"), **SPECS[name],
                "min_batch_size": MIN_BATCH}
        if name in ("krr", "rappor"):
            spec = campaign_spec(name, mechanism=name, min_batch_size=MIN_BATCH)
        reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
        assert reply.status_code == 201, reply.get_json()
        config: dict[str, Any] = reply.get_json()
        rng = random.Random(list(SPECS).index(name))
        _send(http, clock, config, name, [0, 1, 2], rng)
        fold(app.extensions["chorus.storage"])
        _send(http, clock, config, name, [3, 4, 5], rng)
        return config

    return make


def _series(http: FlaskClient, name: str, **query: Any) -> dict[str, Any]:
    reply = http.get(f"/v1/campaigns/{name}/series", query_string=query,
                     headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def _point_of_estimate(body: dict[str, Any], value: str) -> tuple[Any, ...]:
    if body["kind"] == "mean":
        return body["mean"], body["std_error"], body["ci_low"], body["ci_high"]
    if body["kind"] == "means":
        row = next(r for r in body["rows"] if r["attribute"] == value)
        return row["mean"], row["std_error"], row["ci_low"], row["ci_high"]
    row = next(r for r in body["rows"] if r["value"] == value)
    return (row["frequency"], row["frequency_std_error"], row["frequency_ci_low"],
            row["frequency_ci_high"])


@pytest.mark.parametrize("mechanism", list(SPECS))
def test_every_point_is_the_estimates_answer_for_its_interval(
        mechanism: str, http: FlaskClient, filled: Callable[[str], dict[str, Any]]) -> None:
    name = filled(mechanism)["name"]
    candidates = {"candidate": CANDIDATES} if mechanism == "rappor" else {}
    body = _series(http, name, **candidates)
    assert body["kind"] == "series" and body["step"] == HOUR and body["step_name"] == "bucket"
    assert body["window"] == {"start": T0, "end": T0 + len(PER_HOUR) * HOUR}
    assert body["freshness"]["unfolded_reports"] == sum(PER_HOUR[3:])
    expected_values = {"krr": ["a", "b", "c", "d"], "duchi": ["mean"],
                       "duchi_md": ["cpu", "memory"], "rappor": CANDIDATES}[mechanism]
    assert [s["value"] for s in body["series"]] == expected_values
    for series in body["series"]:
        assert [p["n"] for p in series["points"]] == PER_HOUR
        for point in series["points"]:
            reply = http.get(f"/v1/campaigns/{name}/estimates", headers=ANALYST_HEADERS,
                             query_string={"start": point["start"], "end": point["end"],
                                           **candidates})
            if point["suppressed"]:
                assert point["estimate"] is None and point["ci_low"] is None
                assert point["n"] < MIN_BATCH and point["reason"]
                assert reply.status_code == 409
                continue
            assert reply.status_code == 200
            estimate = reply.get_json()
            assert estimate["n"] == point["n"]
            assert (point["estimate"], point["std_error"], point["ci_low"],
                    point["ci_high"]) == _point_of_estimate(estimate, series["value"])
            if mechanism == "rappor":
                row = next(r for r in estimate["rows"] if r["value"] == series["value"])
                assert point["detected"] == row["detected"]


def test_a_longer_step_sums_its_buckets_and_equals_the_estimate(
        http: FlaskClient, filled: Callable[[str], dict[str, Any]]) -> None:
    filled("krr")
    body = _series(http, "krr", step=2 * HOUR)
    points = body["series"][0]["points"]
    assert body["step_name"] == "7200s"
    assert [(p["start"], p["end"], p["n"]) for p in points] == [
        (T0 + i * HOUR, T0 + (i + 2) * HOUR, PER_HOUR[i] + PER_HOUR[i + 1])
        for i in range(0, len(PER_HOUR), 2)]
    estimate = http.get("/v1/campaigns/krr/estimates", headers=ANALYST_HEADERS,
                        query_string={"start": T0 + 2 * HOUR, "end": T0 + 4 * HOUR})
    assert points[1]["estimate"] == estimate.get_json()["rows"][0]["frequency"]


def test_a_post_body_asks_the_same_question(http: FlaskClient,
                                            filled: Callable[[str], dict[str, Any]]) -> None:
    filled("rappor")
    got = _series(http, "rappor", candidate=CANDIDATES[:2], step="7200")
    reply = http.post("/v1/campaigns/rappor/series", headers=ANALYST_HEADERS,
                      json={"candidates": CANDIDATES[:2], "step": 7200})
    assert reply.status_code == 200
    assert reply.get_json() == got


def test_days_start_at_midnight_utc_and_weeks_on_monday(
        http: FlaskClient, filled: Callable[[str], dict[str, Any]]) -> None:
    filled("krr")
    days = _series(http, "krr", step="day")
    assert days["step"] == 86400 and days["step_name"] == "day"
    (point,) = days["series"][0]["points"]  # T0 is midnight; the reports span 6 hours
    assert (point["start"], point["end"], point["n"]) == (T0, T0 + 86400, sum(PER_HOUR))
    weeks = _series(http, "krr", step="week")
    (week,) = weeks["series"][0]["points"]
    monday = datetime.fromtimestamp(week["start"], UTC)
    assert (monday.weekday(), monday.hour, monday.minute) == (0, 0, 0)
    assert week["end"] - week["start"] == 7 * 86400 and week["start"] < T0 < week["end"]
    assert weeks["window"] == {"start": week["start"], "end": week["end"]}
    # A window that does not fall on the grid: the edge points are cut to it, and say so.
    cut = _series(http, "krr", step="day", start=T0 + HOUR, end=T0 + 86400 + HOUR)
    assert [(p["start"], p["end"]) for p in cut["series"][0]["points"]] == [
        (T0 + HOUR, T0 + 86400), (T0 + 86400, T0 + 86400 + HOUR)]


def test_align_outer_widens_a_time_range_to_whole_points(
        http: FlaskClient, filled: Callable[[str], dict[str, Any]]) -> None:
    """A dashboard's time range (Grafana's, to the second) asks with align=outer: the start
    rounds down and the end up to the step's grid, and the answer is the exact question on
    that widened window, point for point; without it such bounds are refused."""
    filled("krr")
    ragged = {"start": T0 + HOUR + 17, "end": T0 + 4 * HOUR + 1}
    widened = _series(http, "krr", align="outer", step=2 * HOUR, **ragged)
    exact = _series(http, "krr", step=2 * HOUR, start=T0, end=T0 + 6 * HOUR)
    assert widened["window"] == {"start": T0, "end": T0 + 6 * HOUR}
    assert widened == exact
    days = _series(http, "krr", align="outer", step="day", **ragged)
    assert [(p["start"], p["end"]) for p in days["series"][0]["points"]] == [
        (T0, T0 + 86400)]
    posted = http.post("/v1/campaigns/krr/series", headers=ANALYST_HEADERS,
                       json={"align": "outer", "step": 2 * HOUR, **ragged})
    assert posted.get_json() == exact
    for align in ("exact", ""):  # the default refuses a bound off the time precision
        refused = http.get("/v1/campaigns/krr/series", headers=ANALYST_HEADERS,
                           query_string={"align": align, **ragged})
        assert refused.status_code == 400
        assert refused.get_json()["type"].endswith("/window-misaligned")


def test_top_k_ranks_by_the_whole_window_estimate(
        http: FlaskClient, filled: Callable[[str], dict[str, Any]]) -> None:
    filled("krr")
    whole = http.get("/v1/campaigns/krr/estimates", headers=ANALYST_HEADERS).get_json()
    ranked = [r["value"] for r in sorted(whole["rows"], key=lambda r: -r["frequency"])]
    body = _series(http, "krr", top=2)
    assert [s["value"] for s in body["series"]] == ranked[:2]
    named = _series(http, "krr", value=["d", "a"])
    assert [s["value"] for s in named["series"]] == ["d", "a"]


def test_csv_has_a_row_per_value_and_point(http: FlaskClient,
                                          filled: Callable[[str], dict[str, Any]]) -> None:
    filled("krr")
    reply = http.get("/v1/campaigns/krr/series", query_string={"value": "b"},
                     headers={**ANALYST_HEADERS, "Accept": "text/csv"})
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    assert list(rows[0]) == ["value", "start", "end", "start_iso", "n", "estimate",
                             "std_error", "ci_low", "ci_high", "suppressed", "epsilon"]
    assert [r["n"] for r in rows] == [str(n) for n in PER_HOUR]
    assert rows[0]["start_iso"] == "2026-01-01T00:00:00Z"
    assert [r["suppressed"] for r in rows] == ["false", "false", "true", "false", "true",
                                               "false"]
    assert rows[2]["estimate"] == "" and rows[0]["epsilon"] == "1.5"


def test_the_library_answers_without_http(app: Flask,
                                          filled: Callable[[str], dict[str, Any]]) -> None:
    filled("duchi")
    storage = app.extensions["chorus.storage"]
    stored = storage.get_campaign("duchi")
    result = estimate_series(storage, stored, start=T0, end=T0 + 3 * HOUR)
    assert result.estimate_kind == "mean" and "at most once per point" in result.variance_model
    assert [p.n for p in result.series[0].points] == PER_HOUR[:3]
    assert result.to_json()["series"][0]["points"][2]["suppressed"] is True
    with pytest.raises(Problem, match="multiple of the time precision"):
        estimate_series(storage, stored, step=5400)


def test_an_empty_campaign_has_an_empty_series(http: FlaskClient,
                                               create: Callable[..., dict[str, Any]]) -> None:
    create("quiet")
    body = _series(http, "quiet")
    assert body["window"] == {"start": None, "end": None}
    assert [s["points"] for s in body["series"]] == [[], [], [], []]


@pytest.mark.parametrize(("query", "status", "kind"), [
    ({"step": "5400"}, 400, "invalid-query"),  # not whole buckets
    ({"step": "fortnight"}, 400, "invalid-query"),
    ({"step": "0"}, 400, "invalid-query"),
    ({"value": "zebra"}, 400, "invalid-query"),
    ({"value": "a", "top": "1"}, 400, "invalid-query"),
    ({"top": "0"}, 400, "invalid-query"),
    ({"start": str(T0 + 1)}, 400, "window-misaligned"),
    ({"start": str(T0), "end": str(T0)}, 400, "invalid-query"),
    ({"start": str(T0), "end": str(T0 + (MAX_POINTS + 1) * HOUR)}, 422,
     "too-many-points"),
    ({"candidate": "x"}, 400, "invalid-query"),  # candidates are for open strings
    ({"steps": "day"}, 400, "invalid-query"),  # misspelt: refused, not ignored
    ({"format": "xml"}, 400, "invalid-query"),
    ({"align": "inner"}, 400, "invalid-query"),
])
def test_bad_questions_are_problems(query: dict[str, str], status: int, kind: str,
                                    http: FlaskClient,
                                    create: Callable[..., dict[str, Any]]) -> None:
    create("krr")
    reply = http.get("/v1/campaigns/krr/series", query_string=query, headers=ANALYST_HEADERS)
    assert reply.status_code == status, reply.get_json()
    assert reply.mimetype == "application/problem+json"
    assert reply.get_json()["type"].endswith("/" + kind)


def test_open_strings_need_candidates(http: FlaskClient,
                                      create: Callable[..., dict[str, Any]]) -> None:
    create("rappor", mechanism="rappor")
    reply = http.get("/v1/campaigns/rappor/series", headers=ANALYST_HEADERS)
    assert reply.status_code == 422
    assert reply.get_json()["type"].endswith("/candidates-required")


def test_days_need_a_precision_that_divides_a_day(
        http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    create("odd", time_precision=7000)
    for step in ("day", "week", "3600"):
        reply = http.get("/v1/campaigns/odd/series", query_string={"step": step},
                         headers=ANALYST_HEADERS)
        assert reply.status_code == 400, step
        assert "7000" in reply.get_json()["detail"]
    assert http.get("/v1/campaigns/odd/series", query_string={"step": "14000"},
                    headers=ANALYST_HEADERS).status_code == 200


def test_series_need_the_analyst_token(http: FlaskClient,
                                       create: Callable[..., dict[str, Any]]) -> None:
    create("krr")
    assert http.get("/v1/campaigns/krr/series").status_code == 401
    assert http.get("/v1/campaigns/krr/series", headers=ADMIN_HEADERS).status_code == 200


def test_far_future_points_render_as_csv(http: FlaskClient,
                                         create: Callable[..., dict[str, Any]]) -> None:
    create("krr")
    last = (2**40 // HOUR) * HOUR  # the year 36812: no ISO 8601 four-digit year
    reply = http.get("/v1/campaigns/krr/series", headers=ANALYST_HEADERS,
                     query_string={"start": last - 2 * HOUR, "end": last, "format": "csv"})
    assert reply.status_code == 200
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    assert len(rows) == 8 and rows[0]["start_iso"] == "" and rows[0]["suppressed"] == "true"


@pytest.mark.parametrize(("step", "seconds", "name"), [
    ("bucket", HOUR, "bucket"), ("3600", HOUR, "bucket"), (7200, 7200, "7200s"),
    ("7200s", 7200, "7200s"), ("day", 86400, "day"), ("week", 7 * 86400, "week")])
def test_steps_are_named_and_sized(step: int | str, seconds: int, name: str) -> None:
    from chorus_collector.analysis.steps import parse_step

    parsed = parse_step(step, HOUR)
    assert (parsed.seconds, parsed.name) == (seconds, name)


def test_unknown_body_fields_are_refused(http: FlaskClient,
                                        create: Callable[..., dict[str, Any]]) -> None:
    create("krr")
    for route, body in (("series", {"steps": "day"}), ("compare", {"baseline": [0, 3600]}),
                        ("series", {"values": "a"}), ("series", ["a"])):
        reply = http.post(f"/v1/campaigns/krr/{route}", json=body, headers=ANALYST_HEADERS)
        assert reply.status_code == 400, (route, body)
        assert reply.get_json()["type"].endswith("/invalid-query")
