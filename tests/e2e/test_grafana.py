"""The shipped Grafana provisioning (deploy/grafana/) charts a live collector's series with
their 95% intervals: the requests the Infinity data source builds from the data source and
the dashboard, sent to a collector on 127.0.0.1, are answered, and the frames Grafana would
chart hold the series route's numbers, a null (a gap) where a point is suppressed, with the
band's two edges the panel fills between. No Grafana server is installable here, so Grafana
and the plugin are modelled by tests/helpers/infinity.py, from their documented request
format and source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from chorus_client import CollectorAPI
from chorus_collector import create_app
from helpers.infinity import csv_frame, expand_env, request_for, send
from helpers.live import (
    BROWSER_SHARES,
    BROWSERS,
    DAY,
    SEED_SPECS,
    LiveCollector,
    categorical,
    lognormal,
    seed_campaign,
    serving,
)
from helpers.support import ADMIN, ANALYST, NOW, FakeClock

pytestmark = pytest.mark.slow

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
PLUGIN = "yesoreyeram-infinity-datasource"
DAYS = 3
#: Grafana's time range, to the millisecond as its time picker gives it: from two days before
#: the first report (empty, suppressed days) to 5 h into the last day, today.
FROM_MS = (int(NOW) - DAYS * DAY) * 1000 + 12_345_678
TO_MS = (int(NOW) + 5 * 3600) * 1000 + 17_250


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCollector]:
    """``browser`` (k-RR) and ``load_time`` (a mean) with 600 simulated users a day for the
    last two days of the range (yesterday and today), folded."""
    folder = tmp_path_factory.mktemp("grafana")
    clock = FakeClock()
    app = create_app({"DATABASE": str(folder / "chorus.db"), "ADMIN_TOKEN": ADMIN,
                      "ANALYST_TOKEN": ANALYST, "FOLD_INTERVAL": 3600}, clock=clock)
    with serving(app, clock) as collector:
        rng = np.random.default_rng(20261216)
        seed_campaign(collector, SEED_SPECS["browser"],
                      [categorical(BROWSERS, BROWSER_SHARES)] * (DAYS - 1), 600, rng)
        seed_campaign(collector, SEED_SPECS["load_time"],
                      [lognormal(2.0, 0.6, 0.0, 10.0)] * (DAYS - 1), 600, rng)
        collector.fold()
        yield collector


def datasource(live: LiveCollector, token: str = ANALYST) -> dict[str, Any]:
    """The provisioned data source, as Grafana reads it with CHORUS_URL and
    CHORUS_ANALYST_TOKEN set in its environment."""
    text = (GRAFANA / "provisioning" / "datasources" / "chorus.yaml").read_text()
    document = yaml.safe_load(expand_env(text, {"CHORUS_URL": live.url,
                                                "CHORUS_ANALYST_TOKEN": token}))
    (source,) = document["datasources"]
    return dict(source)


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        (GRAFANA / "dashboards" / "chorus-series.json").read_text())
    return document


def variable(name: str) -> dict[str, Any]:
    return next(v for v in dashboard()["templating"]["list"] if v["name"] == name)


def panel() -> dict[str, Any]:
    (only,) = dashboard()["panels"]
    return dict(only)


def test_the_data_source_is_infinity_with_the_analyst_token_on_the_collectors_url(
        live: LiveCollector) -> None:
    source = datasource(live)
    assert source["type"] == PLUGIN and source["uid"] == "chorus"
    assert source["url"] == live.url
    assert source["jsonData"]["auth_method"] == "bearerToken"
    assert source["secureJsonData"]["bearerToken"] == ANALYST
    # Every query of the dashboard is on this data source and relative to its URL, so the
    # token is sent to the collector only.
    queries = [panel()["targets"][0], variable("value")["query"]["infinityQuery"]]
    assert all(query["url"].startswith("/v1/") for query in queries)
    assert {panel()["datasource"]["uid"], variable("value")["datasource"]["uid"]} == {"chorus"}
    # "Save & test": the plugin's custom health check, answered.
    check = {"url": source["jsonData"]["customHealthCheckUrl"], "type": "uql"}
    status, _ = send(request_for(check, source, {}, (FROM_MS, TO_MS)))
    assert status == 200


@pytest.mark.parametrize(("campaign", "value"), [("browser", "safari"),
                                                 ("load_time", "mean")])
@pytest.mark.parametrize("step", ["bucket", "day"])
def test_each_panel_charts_the_series_with_its_band(live: LiveCollector, campaign: str,
                                                    value: str, step: str) -> None:
    target = panel()["targets"][0]
    assert (target["type"], target["parser"], target["source"]) == ("csv", "backend", "url")
    request = request_for(target, datasource(live),
                          {"campaign": campaign, "value": value, "step": step},
                          (FROM_MS, TO_MS))
    assert request.method == "GET"
    status, body = send(request)
    assert status == 200, body
    frame = csv_frame(body, target["columns"])
    assert list(frame) == ["ci_high", "ci_low", "estimate", "time"]  # the plugin's order

    # The series route's JSON for the time range widened to whole days (the step's points).
    day = SEED_SPECS[campaign]["time_precision"]
    start, end = FROM_MS // 1000 // day * day, -(-TO_MS // 1000 // day) * day
    answer = CollectorAPI(live.url, ANALYST).series(campaign, start=start, end=end, step=step,
                                                    values=[value])
    (series,) = answer["series"]
    points = series["points"]
    assert len(points) == DAYS + 1  # two empty days, then the seeded two (the last: today)
    assert frame["time"] == [point["start"] for point in points]
    for field in ("estimate", "ci_low", "ci_high"):
        assert frame[field] == [point[field] for point in points]  # None: a gap
    suppressed = [point["suppressed"] for point in points]
    assert suppressed == [True, True, False, False]
    assert frame["ci_low"][2] < frame["estimate"][2] < frame["ci_high"][2]


def test_the_band_fills_between_the_frames_interval_edges() -> None:
    overrides = {override["matcher"]["options"]: {p["id"]: p["value"]
                                                  for p in override["properties"]}
                 for override in panel()["fieldConfig"]["overrides"]}
    names = {column["text"] for column in panel()["targets"][0]["columns"]}
    assert overrides["ci_high"]["custom.fillBelowTo"] == "ci_low"
    assert {"ci_high", "ci_low", "estimate"} <= names and "time" in names
    assert overrides["ci_high"]["custom.lineWidth"] == overrides["ci_low"]["custom.lineWidth"] \
        == 0  # the edges are not drawn as lines, only the band between them
    assert overrides["ci_low"]["custom.hideFrom"]["legend"] is True
    assert panel()["fieldConfig"]["defaults"]["custom"]["spanNulls"] is False


def test_the_value_variable_lists_the_campaigns_values(live: LiveCollector) -> None:
    """One panel per value: the variable's query lists the series' values (Grafana keeps
    each once), and the panel repeats over them."""
    value = variable("value")
    assert value["multi"] and value["includeAll"] and panel()["repeat"] == "value"
    assert panel()["maxPerRow"] == 2
    query = value["query"]["infinityQuery"]
    status, body = send(request_for(query, datasource(live),
                                    {"campaign": "browser", "step": "day"}, (FROM_MS, TO_MS)))
    assert status == 200, body
    listed = csv_frame(body, query["columns"])["value"]
    assert list(dict.fromkeys(listed)) == BROWSERS
    steps = variable("step")
    assert steps["query"].split(",") == ["bucket", "day", "week"]


def test_a_wrong_token_is_refused_on_the_panels(live: LiveCollector) -> None:
    target = panel()["targets"][0]
    request = request_for(target, datasource(live, token="not-the-token"),
                          {"campaign": "browser", "value": "chrome", "step": "day"},
                          (FROM_MS, TO_MS))
    status, body = send(request)
    assert status == 401 and json.loads(body)["type"].endswith("/unauthorized")


def test_the_dashboard_provider_loads_the_folder_compose_mounts() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "chorus.yaml")
                              .read_text())
    (only,) = provider["providers"]
    compose = yaml.safe_load((GRAFANA.parents[1] / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    assert grafana["profiles"] == ["grafana"]
    assert f"./deploy/grafana/dashboards:{only['options']['path']}:ro" in grafana["volumes"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    environment = grafana["environment"]
    assert PLUGIN in environment["GF_PLUGINS_PREINSTALL"]
    assert environment["CHORUS_URL"] == "http://proxy:8000"
    assert environment["CHORUS_ANALYST_TOKEN"].startswith("${CHORUS_ANALYST_TOKEN:?")
    assert grafana["ports"] == ["127.0.0.1:3000:3000"]
