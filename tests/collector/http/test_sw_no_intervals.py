"""A Square Wave campaign states no standard errors or intervals (issue 34 item 3): its
bootstrap's 95% intervals did not cover, so every statistic's std_error, ci_low and ci_high
are null (empty in the CSV), the answer says why and points to hh, and every consumer copes:
series, comparisons (each row says it was not tested), the CLI and the dashboard (no band, no
shaded spans, empty data attributes). The real client reports through the HTTP API."""

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
from chorus_collector.cli import analysis as analysis_cli
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from helpers.support import ADMIN, ANALYST, ANALYST_HEADERS, NOW, FakeClock

URL = "http://collector.test"
HOUR = 3600
USERS = 3000  # per hour, two hours
INTERVAL_FIELDS = ("std_error", "ci_low", "ci_high")


@pytest.fixture
def sw_latencies(app: Flask, clock: FakeClock) -> dict[str, Any]:
    """An sw campaign over [1, 10⁴] ms on a log scale (64 buckets): hour 0 with a median of
    200 ms, hour 1 with 400 ms."""
    transport = WSGITransport(app)
    spec = {"name": "swlat", "mechanism": "sw", "epsilon": 2.0,
            "domain": {"kind": "numeric", "lo": 1, "hi": 10_000},
            "params": {"buckets": 64, "scale": "log"},
            "min_batch_size": 100, "privacy": {"budget": 1e6, "max_reports": 10**6}}
    config = CollectorAPI(URL, ADMIN, transport=transport).create_campaign(spec)
    rng = random.Random(23)
    for hour, median in enumerate((200.0, 400.0)):
        clock.now = NOW + hour * HOUR
        client = Client(URL, ephemeral=True, transport=transport,
                        campaigns={"swlat": config}, rng=random.Random(hour),
                        allow_insecure_rng=True, lifetime_budget=math.inf,
                        max_epsilon=math.inf, batch_size=500, clock=clock, send_delay=0.0)
        for _ in range(USERS):
            assert client.report("swlat", rng.lognormvariate(math.log(median), 0.7)) == "queued"
        client.flush()
        assert client.totals.accepted == USERS
    clock.now = NOW + 2 * HOUR
    return {"config": config}


def test_the_answer_has_no_intervals_and_says_why(http: FlaskClient,
                                                  sw_latencies: dict[str, Any]) -> None:
    body = http.get("/v1/campaigns/swlat/estimates?quantiles=0.5,0.9,0.95,0.99&range=100:1000",
                    headers=ANALYST_HEADERS).get_json()
    assert body["mechanism"] == "sw" and body["n"] == 2 * USERS
    rows = [*body["histogram"], *body["cdf"], *body["quantiles"], *body["ranges"], body["mean"]]
    assert len(rows) == 64 + 64 + 4 + 1 + 1
    for row in rows:
        assert all(row[name] is None for name in INTERVAL_FIELDS), row
        assert math.isfinite(row["value"])
    # The point estimates are still there and sensible: the median of the two hours lies
    # between the two hours' medians.
    assert 200 < body["quantiles"][0]["value"] < 400
    assert body["extra"]["intervals"].startswith("none: ")
    assert body["uncertainty"].startswith("none: ")
    assert any("no standard errors or 95% intervals" in w and "(hh)" in w
               for w in body["warnings"]), body["warnings"]
    # No bootstrap was run.
    assert not any(key.startswith("bootstrap") for key in body["extra"])
    reply = http.get("/v1/campaigns/swlat/estimates?format=csv&range=100:1000",
                     headers=ANALYST_HEADERS)
    table = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    assert len(table) == 64 + 64 + 3 + 1 + 1
    assert all(row[name] == "" for row in table for name in INTERVAL_FIELDS)
    assert all(row["value"] != "" for row in table)


def test_series_and_comparison_answer_without_standard_errors(
        http: FlaskClient, sw_latencies: dict[str, Any]) -> None:
    series = http.get("/v1/campaigns/swlat/series", headers=ANALYST_HEADERS)
    assert series.status_code == 200, series.get_json()
    lines = series.get_json()["series"]
    assert [s["value"] for s in lines] == ["p50", "p95", "p99", "mean"]
    for line in lines:
        assert [p["n"] for p in line["points"]] == [USERS, USERS]
        for point in line["points"]:
            assert point["estimate"] is not None and not point["suppressed"]
            assert all(point[name] is None for name in INTERVAL_FIELDS), point
    start = int(NOW)
    query = (f"baseline_start={start}&baseline_end={start + HOUR}&start={start + HOUR}"
             f"&end={start + 2 * HOUR}")
    reply = http.get(f"/v1/campaigns/swlat/compare?{query}", headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    rows = {row["value"]: row for row in reply.get_json()["rows"]}
    assert set(rows) == {"p50", "p95", "p99", "mean"}
    for row in rows.values():
        assert row["difference"] == pytest.approx(row["current_estimate"]
                                                  - row["baseline_estimate"])
        for name in ("std_error", "ci_low", "ci_high", "p_value", "adjusted_p_value",
                     "baseline_std_error", "current_std_error"):
            assert row[name] is None, (name, row)
        assert not row["significant"] and not row["ci_excludes_zero"]
        assert row["note"].startswith("not tested: ") and "hh" in row["note"]
    assert rows["p50"]["difference"] > 0  # the median doubled
    csv_reply = http.get(f"/v1/campaigns/swlat/compare?{query}&format=csv",
                         headers=ANALYST_HEADERS)
    table = list(csv.DictReader(io.StringIO(csv_reply.get_data(as_text=True))))
    assert [row["p_value"] for row in table] == [""] * 4
    assert all(row["note"].startswith("not tested: ") for row in table)


def test_the_cli_prints_no_intervals(app: Flask, sw_latencies: dict[str, Any],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    transport = WSGITransport(app)
    for module in (campaigns_cli, analysis_cli):
        monkeypatch.setattr(module, "collector_api", lambda url, token: CollectorAPI(
            url, token, transport=transport))
    env = {"CHORUS_URL": URL, "CHORUS_TOKEN": ANALYST}
    result = CliRunner().invoke(cli, ["estimates", "swlat", "--range", "100:1000"], env=env)
    assert result.exit_code == 0, result.output
    assert re.search(r"p50 +[0-9.]+ +\[ +—, +—\]", result.output), result.output
    assert "intervals: none: " in result.output
    assert re.search(r"share in \[100, 1000\] 0\.\d{4}\n", result.output), result.output
    start = int(NOW)
    compared = CliRunner().invoke(cli, [
        "compare", "swlat", "--baseline-start", str(start), "--baseline-end",
        str(start + HOUR), "--start", str(start + HOUR), "--end", str(start + 2 * HOUR)],
        env=env)
    assert compared.exit_code == 0, compared.output
    assert "p50, p95, p99, mean: not tested: " in compared.output, compared.output


def test_the_dashboard_draws_no_bands(http: FlaskClient, sw_latencies: dict[str, Any]) -> None:
    token = re.search(r'name="csrf_token" value="([^"]+)"',
                      http.get("/login").get_data(as_text=True))
    assert token is not None
    signed = http.post("/login", data={"token": ANALYST, "csrf_token": token.group(1)})
    assert signed.status_code == 302
    page = http.get("/campaigns/swlat?quantiles=0.5,0.95")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    histogram = html[html.index('<svg class="chart histogram"'):]
    histogram = histogram[:histogram.index("</svg>")]
    assert 'class="band"' not in histogram and 'class="span"' not in histogram
    assert histogram.count('<rect class="bucket"') == 64
    assert re.findall(r'<rect class="bucket"[^>]*data-ci-low="([^"]*)" data-ci-high="([^"]*)"',
                      histogram) == [("", "")] * 64
    assert re.findall(r'<g class="quantile" data-label="(p\d+)" data-estimate="[^"]+" '
                      r'data-ci-low="" data-ci-high=""', histogram) == ["p50", "p95"]
    assert 'id="no-intervals"' in html and "hierarchical-histogram (hh)" in html
    # The series chart: a line and points per quantile, no band.
    series = html[html.index('id="series"'):html.index('id="comparison"')]
    assert 'class="line"' in series and 'class="band"' not in series
    assert "without intervals (these estimates state none)" in series
    # The comparison: each row flagged as not tested, and why, once.
    comparison = html[html.index('id="comparison-table"'):]
    assert comparison.count('<span class="untested"') == 4
    assert comparison.count('class="meta comparison-untested">Not tested: ') == 1
