"""Distribution campaigns end to end: the real client reports latencies to an in-process
collector over its HTTP API; the estimates route answers the histogram, CDF, quantiles, ranges
and mean as JSON and as a long CSV; the CLI prints them; series and comparisons read p50, p95,
p99 and the mean; the dashboard draws the histogram with the API's numbers; bad questions are
4xx problems."""

from __future__ import annotations

import csv
import io
import math
import random
import re
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import Client, CollectorAPI, WSGITransport
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from helpers.seeded import SeededTemplate, seed_template
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, NOW, FakeClock

URL = "http://collector.test"
HOUR = 3600
USERS = 6000  # per hour, two hours


def _lognormal(rng: random.Random, median: float) -> float:
    return rng.lognormvariate(math.log(median), 0.7)


def _true_share(values: list[float], a: float, b: float) -> float:
    return sum(a <= min(max(v, 1.0), 10_000.0) <= b for v in values) / len(values)


def _true_quantile(values: list[float], q: float) -> float:
    ordered = sorted(min(max(v, 1.0), 10_000.0) for v in values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _fill(app: Flask, clock: FakeClock) -> dict[str, Any]:
    """An hh campaign over [1, 10⁴] ms on a log scale (64 buckets): hour 0 with a median of
    200 ms, hour 1 with 400 ms, each reported by USERS installs through the real client."""
    transport = WSGITransport(app)
    spec = {"name": "latency", "mechanism": "hh", "epsilon": 2.0,
            "domain": {"kind": "numeric", "lo": 1, "hi": 10_000},
            "params": {"branching": 4, "buckets": 64, "scale": "log"},
            "min_batch_size": 100, "privacy": {"budget": 1e6, "max_reports": 10**6}}
    config = CollectorAPI(URL, ADMIN, transport=transport).create_campaign(spec)
    rng = random.Random(17)
    hours: list[list[float]] = []
    for hour, median in enumerate((200.0, 400.0)):
        clock.now = NOW + hour * HOUR
        values = [_lognormal(rng, median) for _ in range(USERS)]
        client = Client(URL, ephemeral=True, transport=transport,
                        campaigns={"latency": config}, rng=random.Random(hour),
                        allow_insecure_rng=True, lifetime_budget=math.inf,
                        max_epsilon=math.inf, batch_size=500, clock=clock, send_delay=0.0)
        assert {client.report("latency", v) for v in values} == {"queued"}
        client.flush()
        assert client.totals.accepted == USERS
        hours.append(values)
    return {"config": config, "hours": hours, "all": hours[0] + hours[1]}


@pytest.fixture(scope="module")
def seeded_template(request: pytest.FixtureRequest, backend: str,
                    tmp_path_factory: pytest.TempPathFactory) -> SeededTemplate:
    """``_fill`` once for the module: every test here starts from its own copy
    (``database``)."""
    return seed_template(request, backend, tmp_path_factory, _fill)


@pytest.fixture
def latencies(seeded_template: SeededTemplate, clock: FakeClock) -> dict[str, Any]:
    """What ``_fill`` reported, two hours after the first report."""
    clock.now = NOW + 2 * HOUR
    data: dict[str, Any] = seeded_template.data
    return data


def test_estimates_answer_quantiles_ranges_and_the_histogram(
        http: FlaskClient, latencies: dict[str, Any]) -> None:
    reply = http.get("/v1/campaigns/latency/estimates?quantiles=0.5,0.9&range=100:1000"
                     "&range=1:50", headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body = reply.get_json()
    assert body["kind"] == "distribution" and body["n"] == 2 * USERS
    assert len(body["histogram"]) == 64 and len(body["edges"]) == 65
    assert body["scale"] == "log" and body["postprocessing"] == "none (unbiased)"
    assert "analytic" in body["uncertainty"]
    assert sum(b["value"] for b in body["histogram"]) == pytest.approx(1.0, abs=1e-9)
    values = latencies["all"]
    # One seeded draw: each answer within 4 standard errors (quantiles: 4 half-intervals).
    for row in body["quantiles"]:
        truth = _true_quantile(values, row["q"])
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        assert abs(row["value"] - truth) < 2 * (row["ci_high"] - row["ci_low"]), row
    for row in body["ranges"]:
        truth = _true_share(values, row["lo"], row["hi"])
        assert abs(row["value"] - truth) < 4 * row["std_error"], (row, truth)
    cdf = [c["value"] for c in body["cdf"]]
    assert cdf == sorted(cdf) and cdf[-1] == pytest.approx(1.0, abs=1e-9)


def test_the_csv_is_one_long_table_with_the_window_n_and_epsilon(
        http: FlaskClient, latencies: dict[str, Any]) -> None:
    reply = http.get("/v1/campaigns/latency/estimates?format=csv&range=100:1000",
                     headers=ANALYST_HEADERS)
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    kinds = [row["statistic"] for row in rows]
    assert kinds.count("bucket") == 64 and kinds.count("cdf") == 64
    assert kinds.count("quantile") == 3 and kinds.count("range") == 1 and kinds[-1] == "mean"
    json_body = http.get("/v1/campaigns/latency/estimates?range=100:1000",
                         headers=ANALYST_HEADERS).get_json()
    quantiles = [row for row in rows if row["statistic"] == "quantile"]
    for row, q in zip(quantiles, json_body["quantiles"], strict=True):
        assert float(row["q"]) == q["q"] and float(row["value"]) == pytest.approx(q["value"])
    assert {row["n"] for row in rows} == {str(2 * USERS)}
    assert {row["epsilon"] for row in rows} == {"2.0"}


@pytest.mark.parametrize(("query", "detail"), [
    ("quantiles=1.5", "strictly between 0 and 1"),
    ("quantiles=0.5,abc", "must be a finite number"),
    ("range=5:1", "a < b"),
    ("range=1", "a range is a:b"),
    ("range=1:nan", "must be a finite number"),
    ("postprocessing=em", "postprocessing must be one of"),
])
def test_bad_distribution_questions_are_problems(http: FlaskClient,
                                                 latencies: dict[str, Any], query: str,
                                                 detail: str) -> None:
    reply = http.get(f"/v1/campaigns/latency/estimates?{query}", headers=ANALYST_HEADERS)
    assert reply.status_code == 400, reply.get_data(as_text=True)
    assert reply.mimetype == "application/problem+json"
    assert detail in reply.get_json()["detail"]


def test_quantiles_are_refused_for_a_campaign_that_estimates_frequencies(
        http: FlaskClient) -> None:
    spec = {"name": "browsers", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b"]}
    assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    reply = http.get("/v1/campaigns/browsers/estimates?quantiles=0.5", headers=ANALYST_HEADERS)
    assert reply.status_code == 400
    assert "distribution campaigns" in reply.get_json()["detail"]


def test_a_json_body_takes_ranges_as_pairs(http: FlaskClient,
                                           latencies: dict[str, Any]) -> None:
    reply = http.post("/v1/campaigns/latency/estimates", headers=ANALYST_HEADERS,
                      json={"quantiles": [0.25], "ranges": [[1, 100], "100:10000"]})
    assert reply.status_code == 200, reply.get_json()
    body = reply.get_json()
    assert [q["q"] for q in body["quantiles"]] == [0.25]
    shares = [r["value"] for r in body["ranges"]]
    # [1, 100] and [100, 10⁴] cover everything (100 is a bucket edge on this grid? no matter:
    # the two shares split the bucket holding 100 between them).
    assert sum(shares) == pytest.approx(1.0, abs=1e-9)


def test_series_and_comparison_read_the_quantiles_and_the_mean(
        http: FlaskClient, latencies: dict[str, Any]) -> None:
    series = http.get("/v1/campaigns/latency/series", headers=ANALYST_HEADERS).get_json()
    assert series["estimate_kind"] == "distribution"
    assert [s["value"] for s in series["series"]] == ["p50", "p95", "p99", "mean"]
    p50 = series["series"][0]["points"]
    assert [p["n"] for p in p50] == [USERS, USERS]
    for point, values in zip(p50, latencies["hours"], strict=True):
        assert point["ci_low"] <= _true_quantile(values, 0.5) * 1.15
        assert point["ci_high"] >= _true_quantile(values, 0.5) / 1.15
    start = int(NOW)
    change = http.get(f"/v1/campaigns/latency/compare?baseline_start={start}&baseline_end="
                      f"{start + HOUR}&start={start + HOUR}&end={start + 2 * HOUR}",
                      headers=ANALYST_HEADERS).get_json()
    rows = {row["value"]: row for row in change["rows"]}
    assert rows["p50"]["significant"] and rows["p50"]["difference"] > 0  # the median doubled


def test_the_cli_prints_quantiles_ranges_and_a_histogram(
        app: Flask, latencies: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    transport = WSGITransport(app)
    monkeypatch.setattr(campaigns_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=transport))
    result = CliRunner().invoke(cli, ["estimates", "latency", "--quantiles", "0.5,0.9",
                                      "--range", "100:1000"],
                                env={"CHORUS_URL": URL, "CHORUS_TOKEN": ANALYST})
    assert result.exit_code == 0, result.output
    api = CollectorAPI(URL, ANALYST, transport=transport)
    body = api.estimates("latency", quantiles=[0.5, 0.9], ranges=[(100, 1000)])
    p90 = body["quantiles"][1]
    assert re.search(rf"p90 +{p90['value']:.6g} +\[ *{p90['ci_low']:.6g}, *"
                     rf"{p90['ci_high']:.6g}\]", result.output), result.output
    assert "share in [100, 1000]" in result.output and "histogram (64 buckets" in result.output
    bad = CliRunner().invoke(cli, ["estimates", "latency", "--range", "100-1000"],
                             env={"CHORUS_URL": URL, "CHORUS_TOKEN": ANALYST})
    assert bad.exit_code != 0 and "expected A:B" in bad.output


def test_the_dashboard_draws_the_histogram_with_the_apis_numbers(
        http: FlaskClient, latencies: dict[str, Any]) -> None:
    token = re.search(r'name="csrf_token" value="([^"]+)"',
                      http.get("/login").get_data(as_text=True))
    assert token is not None
    signed = http.post("/login", data={"token": ANALYST, "csrf_token": token.group(1)})
    assert signed.status_code == 302, signed.get_data(as_text=True)[:300]
    page = http.get("/campaigns/latency?quantiles=0.5,0.95&ranges=100:1000")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    body = http.get("/v1/campaigns/latency/estimates?quantiles=0.5,0.95&range=100:1000",
                    headers=ANALYST_HEADERS).get_json()
    buckets = re.findall(r'<rect class="bucket"[^>]*data-estimate="([^"]*)"', html)
    assert [float(v) for v in buckets] == [b["value"] for b in body["histogram"]]
    markers = re.findall(r'<g class="quantile" data-label="([^"]*)" data-estimate="([^"]*)" '
                         r'data-ci-low="([^"]*)" data-ci-high="([^"]*)"', html)
    assert [(m[0], float(m[1]), float(m[2]), float(m[3])) for m in markers] == [
        (f"p{q['q'] * 100:g}", q["value"], q["ci_low"], q["ci_high"])
        for q in body["quantiles"]]
    assert "share in [100, 1000]" in html and 'id="histogram-table"' in html
    # hh states intervals: the series has its bands (an sw page says it has none).
    assert "bands their 95% intervals" in html and 'id="no-intervals"' not in html


def test_a_repeated_fit_is_served_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed bucket's statistic never changes: the same (mechanism, n, method, statistic)
    is fitted once; another statistic or method is fitted afresh."""
    import numpy as np

    from chorus_collector.estimators import Query, estimator_for
    from chorus_shared import campaign_from_spec

    campaign = campaign_from_spec({"name": "cached", "mechanism": "sw", "epsilon": 1.0,
                                   "domain": {"kind": "numeric", "lo": 0, "hi": 1},
                                   "params": {"buckets": 16}})
    estimator = estimator_for("sw")
    calls: list[str] = []
    original = type(estimator).fit

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args[3])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(estimator), "fit", counting)
    state = np.arange(16, dtype=np.int64) * 10 + 7
    n = int(state.sum())
    first = estimator.finalize(campaign, n, state, Query())
    again = estimator.finalize(campaign, n, state.copy(), Query(quantiles=(0.3,)))
    assert calls == ["ems"]
    assert again.histogram == first.histogram
    estimator.finalize(campaign, n, state, Query(postprocessing="em"))
    estimator.finalize(campaign, n + 1, state + np.eye(16, dtype=np.int64)[0], Query())
    assert calls == ["ems", "em", "ems"]


def test_a_square_wave_series_is_bounded_by_its_fits(http: FlaskClient,
                                                     clock: FakeClock) -> None:
    """Each point of a Square Wave series refits the distribution: past the budget (320
    points at 256 × 256 buckets) the series is refused as too large, with a way out, instead
    of outliving the server's worker timeout. Its points state no intervals."""
    spec = {"name": "sw-series", "mechanism": "sw", "epsilon": 1.0, "min_batch_size": 1,
            "domain": {"kind": "numeric", "lo": 0, "hi": 1}, "time_precision": 60,
            "privacy": {"budget": 1e6, "max_reports": 10**6}}
    assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    start = int(NOW)
    reply = http.get(f"/v1/campaigns/sw-series/series?start={start}&end={start + 321 * 60}",
                     headers=ANALYST_HEADERS)
    assert reply.status_code == 422, reply.get_json()
    assert reply.get_json()["type"].endswith("/query-too-large")
    assert "at most 320 points" in reply.get_json()["detail"]
    fine = http.get(f"/v1/campaigns/sw-series/series?start={start}&end={start + 320 * 60}",
                    headers=ANALYST_HEADERS)
    assert fine.status_code == 200, fine.get_json()
