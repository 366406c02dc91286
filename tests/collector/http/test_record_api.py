"""Record campaigns over the HTTP API, end to end: the real client reports records of three
attributes to an in-process collector; the estimates route answers every marginal, the joints
asked for (``joint=a,b``, repeatable, or ``"joints"`` in a JSON body) with both conditionals
and a test of independence, as JSON that matches the OpenAPI description and as a long CSV;
series and comparisons follow each ``attribute=value``; the estimates cover the truth; bad
questions are 400 ``invalid-query`` problems."""

from __future__ import annotations

import csv
import io
import itertools
import math
import random
from typing import Any

import numpy as np
import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import Client, CollectorAPI, WSGITransport
from chorus_collector.http.openapi import openapi_document
from helpers.seeded import SeededTemplate, seed_template
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST_HEADERS, NOW, FakeClock, z_threshold

URL = "http://collector.test"
HOUR = 3600
USERS = 3000  # per hour, two hours
NAMES = ("browser", "os", "crashed")
VALUES = (("chrome", "firefox", "safari"), ("linux", "mac", "windows", "android"),
          ("no", "yes"))
BROWSER = np.array([0.6, 0.3, 0.1])
#: The OS shares in hour 0 and hour 1: mac gains 20 points from windows (a planted change).
OS = (np.array([0.1, 0.3, 0.4, 0.2]), np.array([0.1, 0.5, 0.2, 0.2]))
#: P(crashed = yes | browser): safari crashes three times as often (a planted dependence).
CRASH = np.array([0.1, 0.1, 0.3])
SPEC = {"name": "crashes", "mechanism": "marginals", "epsilon": 2.0, "min_batch_size": 100,
        "domain": {"kind": "record", "attributes": [
            {"name": name, "values": list(values)} for name, values in zip(NAMES, VALUES,
                                                                           strict=True)]},
        "privacy": {"budget": 1e6, "max_reports": 10**6}}


def _model(hour: int) -> np.ndarray:
    """The hour's true joint distribution of (browser, os, crashed): independent browser and
    OS, crashes depending on the browser."""
    crash = np.stack([1 - CRASH, CRASH], axis=1)  # browser × crashed
    return BROWSER[:, None, None] * OS[hour][None, :, None] * crash[:, None, :]


def _truth(axes: tuple[int, ...]) -> np.ndarray:
    """The true table of the attributes ``axes`` over both hours (equal users per hour)."""
    model = (_model(0) + _model(1)) / 2
    drop = tuple(a for a in range(3) if a not in axes)
    return np.transpose(model.sum(axis=drop), np.argsort(np.argsort(axes)))


def _records(hour: int, n: int, rng: np.random.Generator) -> list[dict[str, str]]:
    cells = rng.choice(24, size=n, p=_model(hour).ravel())
    return [dict(zip(NAMES, (VALUES[a][i] for a, i in enumerate(np.unravel_index(c, (3, 4, 2)))),
                     strict=True)) for c in cells]


def _fill(app: Flask, clock: FakeClock) -> dict[str, Any]:
    """The campaign, and USERS records an hour for two hours reported by the real client."""
    transport = WSGITransport(app)
    config = CollectorAPI(URL, ADMIN, transport=transport).create_campaign(SPEC)
    rng = np.random.default_rng(18)
    for hour in range(2):
        clock.now = NOW + hour * HOUR
        client = Client(URL, ephemeral=True, transport=transport,
                        campaigns={"crashes": config}, rng=random.Random(hour),
                        allow_insecure_rng=True, lifetime_budget=math.inf,
                        max_epsilon=math.inf, batch_size=1000, clock=clock, send_delay=0.0)
        assert {client.report("crashes", r) for r in _records(hour, USERS, rng)} == {"queued"}
        client.flush()
        assert client.totals.accepted == USERS
    return config


@pytest.fixture(scope="module")
def seeded_template(request: pytest.FixtureRequest, backend: str,
                    tmp_path_factory: pytest.TempPathFactory) -> SeededTemplate:
    """``_fill`` once for the module: every test here starts from its own copy
    (``database``)."""
    return seed_template(request, backend, tmp_path_factory, _fill)


@pytest.fixture
def records(seeded_template: SeededTemplate, clock: FakeClock) -> dict[str, Any]:
    """The campaign ``_fill`` made, two hours after the first report."""
    clock.now = NOW + 2 * HOUR
    config: dict[str, Any] = seeded_template.data
    return config


def _get(http: FlaskClient, query: str = "") -> dict[str, Any]:
    reply = http.get(f"/v1/campaigns/crashes/estimates{query}", headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def _cells(joint: dict[str, Any]) -> np.ndarray:
    return np.array([c["frequency"] for c in joint["cells"]]).reshape(joint["shape"])


def test_the_answer_has_every_marginal_and_every_pair_and_matches_the_openapi(
        http: FlaskClient, records: dict[str, Any]) -> None:
    reply = http.get("/v1/campaigns/crashes/estimates", headers=ANALYST_HEADERS)
    assert reply.status_code == 200
    operation = schemathesis.openapi.from_dict(openapi_document())[
        "/v1/campaigns/{name}/estimates"]["GET"]
    operation.validate_response(reply)  # raises if the answer strays from its description
    body = reply.get_json()
    assert body["kind"] == "record" and body["n"] == 2 * USERS
    assert body["attributes"] == list(NAMES) and body["mechanism"] == "marginals"
    assert [m["attribute"] for m in body["marginals"]] == list(NAMES)
    for marginal, values in zip(body["marginals"], VALUES, strict=True):
        assert [r["value"] for r in marginal["rows"]] == list(values)
        # Each attribute is in 2 of the 3 collected pairs: about 2/3 of the reports.
        assert 0.6 * 2 * USERS < marginal["reports"] < 0.73 * 2 * USERS
        for row in marginal["rows"]:
            assert row["ci_low"] < row["frequency"] < row["ci_high"]
            assert row["ci_high"] - row["ci_low"] == pytest.approx(
                2 * 1.959963984540054 * row["std_error"])
    pairs = list(itertools.combinations(range(3), 2))
    assert [j["attributes"] for j in body["joints"]] == [[NAMES[a], NAMES[b]] for a, b in pairs]
    for joint, (a, b) in zip(body["joints"], pairs, strict=True):
        assert joint["shape"] == [len(VALUES[a]), len(VALUES[b])]
        assert [c["values"] for c in joint["cells"]] == [
            [x, y] for x in VALUES[a] for y in VALUES[b]]  # row-major
        of_second, of_first = joint["conditionals"]
        assert (of_second["of"], of_second["given"]) == (NAMES[b], NAMES[a])
        assert (of_first["of"], of_first["given"]) == (NAMES[a], NAMES[b])
        assert len(of_second["cells"]) == len(of_first["cells"]) == len(joint["cells"])
        test = joint["independence"]
        assert set(test) == {"statistic", "df", "p_value", "method", "reject_at_0.05", "power"}
        assert [p["cohens_w"] for p in test["power"]] == [0.1, 0.3]
        assert 0.05 < test["power"][0]["power"] < test["power"][1]["power"] <= 1
        assert test["df"] == (len(VALUES[a]) - 1) * (len(VALUES[b]) - 1)
        assert 0 <= test["p_value"] <= 1 and "pearson" in test["method"]
        # Each collected pair is its own k-RR table: its cells sum to 1 exactly (unbiased
        # k-RR estimates of all cells of one oracle sum to 1) and the conditionals per row.
        assert _cells(joint).sum() == pytest.approx(1.0, abs=1e-9)
        for given in (of_second, of_first):
            rows: dict[str, float] = {}
            for cell in given["cells"]:
                rows[cell["given_value"]] = rows.get(cell["given_value"], 0.0) + \
                    cell["frequency"]
            assert rows == pytest.approx(dict.fromkeys(rows, 1.0), abs=1e-9)


def test_the_estimates_cover_the_truth(http: FlaskClient, records: dict[str, Any]) -> None:
    """Every marginal share and every joint cell (9 + 26 statistics) within its Bonferroni
    interval for a family-wise error of 1%: the estimates are unbiased and their standard
    errors (the iid-sampling model: the truth is the population's distribution) are not too
    small. One seeded draw; a wrong debiasing or a missed variance term fails it."""
    body = _get(http)
    family = sum(len(v) for v in VALUES) + sum(len(j["cells"]) for j in body["joints"])
    assert family == 35
    z = z_threshold(0.01, family)
    misses = []
    for a, marginal in enumerate(body["marginals"]):
        for row, truth in zip(marginal["rows"], _truth((a,)), strict=True):
            if abs(row["frequency"] - truth) > z * row["std_error"]:
                misses.append((marginal["attribute"], row, truth))
    for joint in body["joints"]:
        axes = tuple(NAMES.index(name) for name in joint["attributes"])
        for cell, truth in zip(joint["cells"], _truth(axes).ravel(), strict=True):
            if abs(cell["frequency"] - truth) > z * cell["std_error"]:
                misses.append((joint["attributes"], cell, truth))
    assert misses == []
    # The intervals are not vacuous: a standard error of a few points at n = 6,000.
    assert max(c["std_error"] for j in body["joints"] for c in j["cells"]) < 0.04


def test_joints_are_asked_for_by_query_or_body(http: FlaskClient,
                                               records: dict[str, Any]) -> None:
    default = {tuple(j["attributes"]): j for j in _get(http)["joints"]}
    one = _get(http, "?joint=os,browser")
    assert [j["attributes"] for j in one["joints"]] == [["os", "browser"]]
    assert one["joints"][0]["shape"] == [4, 3]
    # The same numbers as the browser × os joint, transposed.
    assert _cells(one["joints"][0]) == pytest.approx(_cells(default[("browser", "os")]).T,
                                                     abs=1e-12)
    assert one["marginals"] == _get(http)["marginals"]
    two = _get(http, "?joint=browser,crashed&joint=os,crashed")
    assert [j["attributes"] for j in two["joints"]] == [["browser", "crashed"],
                                                        ["os", "crashed"]]
    reply = http.post("/v1/campaigns/crashes/estimates", headers=ANALYST_HEADERS,
                      json={"joints": [["browser", "crashed"], "os,crashed"]})
    assert reply.status_code == 200, reply.get_json()
    assert reply.get_json()["joints"] == two["joints"]
    api = CollectorAPI(URL, "analyst-secret-token", transport=WSGITransport(http.application))
    assert api.estimates("crashes", joints=[("os", "crashed")])["joints"] == two["joints"][1:]


def test_postprocessing_makes_the_tables_agree(http: FlaskClient,
                                               records: dict[str, Any]) -> None:
    """consistent: every table non-negative, summing to 1, and each joint's margins equal to
    the attributes' marginals (the collected pairs disagree on them before); norm-sub: each
    table non-negative and summing to 1 on its own."""
    raw = _get(http)
    browser_from = [_cells(j).sum(axis=1) for j in raw["joints"][:2]]
    assert np.max(np.abs(browser_from[0] - browser_from[1])) > 1e-3  # they disagree unbiased
    for method in ("consistent", "norm-sub"):
        body = _get(http, f"?postprocessing={method}")
        assert method in body["postprocessing"]
        marginals = {m["attribute"]: np.array([r["frequency"] for r in m["rows"]])
                     for m in body["marginals"]}
        for table in [*marginals.values(), *(_cells(j) for j in body["joints"])]:
            assert table.min() >= 0 and table.sum() == pytest.approx(1.0, abs=1e-9)
        if method == "consistent":
            for joint in body["joints"]:
                first, second = joint["attributes"]
                assert _cells(joint).sum(axis=1) == pytest.approx(marginals[first], abs=1e-8)
                assert _cells(joint).sum(axis=0) == pytest.approx(marginals[second], abs=1e-8)


def test_the_csv_is_one_long_table_with_the_jsons_numbers(
        http: FlaskClient, records: dict[str, Any]) -> None:
    reply = http.get("/v1/campaigns/crashes/estimates?format=csv&joint=browser,crashed",
                     headers=ANALYST_HEADERS)
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    kinds = [row["statistic"] for row in rows]
    assert kinds.count("marginal") == 9 and kinds.count("joint") == 6
    assert kinds.count("conditional") == 12 and kinds[-1] == "independence"
    body = _get(http, "?joint=browser,crashed")
    joint = body["joints"][0]
    cells = [row for row in rows if row["statistic"] == "joint"]
    for row, cell in zip(cells, joint["cells"], strict=True):
        assert row["attributes"] == "browser|crashed" and row["values"] == "|".join(
            cell["values"])
        assert float(row["estimate"]) == pytest.approx(cell["frequency"], rel=1e-12)
        assert float(row["ci_low"]) == pytest.approx(cell["ci_low"], rel=1e-12)
    given = [row for row in rows if row["statistic"] == "conditional"][:6]
    for row, cell in zip(given, joint["conditionals"][0]["cells"], strict=True):
        assert (row["attributes"], row["values"], row["given"]) == (
            "crashed", cell["value"], f"browser={cell['given_value']}")
        assert float(row["estimate"]) == pytest.approx(cell["frequency"], rel=1e-12)
    test = rows[-1]
    assert float(test["p_value"]) == pytest.approx(joint["independence"]["p_value"],
                                                   rel=1e-12)
    assert int(test["df"]) == 2 and {row["n"] for row in rows} == {str(2 * USERS)}


def test_series_and_comparisons_follow_each_attribute_value(
        http: FlaskClient, records: dict[str, Any]) -> None:
    series = http.get("/v1/campaigns/crashes/series", headers=ANALYST_HEADERS).get_json()
    assert series["estimate_kind"] == "record"
    labels = [f"{n}={v}" for n, values in zip(NAMES, VALUES, strict=True) for v in values]
    assert [s["value"] for s in series["series"]] == labels
    start = int(NOW)
    for hour in range(2):  # a point is the estimates route's answer for its hour
        window = _get(http, f"?start={start + hour * HOUR}&end={start + (hour + 1) * HOUR}")
        mac = next(r for r in window["marginals"][1]["rows"] if r["value"] == "mac")
        point = series["series"][labels.index("os=mac")]["points"][hour]
        assert point["n"] == USERS
        assert point["estimate"] == pytest.approx(mac["frequency"], rel=1e-12)
        assert point["std_error"] == pytest.approx(mac["std_error"], rel=1e-12)
    chosen = http.get("/v1/campaigns/crashes/series?value=os%3Dmac&value=crashed%3Dyes",
                      headers=ANALYST_HEADERS).get_json()
    assert [s["value"] for s in chosen["series"]] == ["os=mac", "crashed=yes"]
    change = http.get(f"/v1/campaigns/crashes/compare?baseline_start={start}&baseline_end="
                      f"{start + HOUR}&start={start + HOUR}&end={start + 2 * HOUR}",
                      headers=ANALYST_HEADERS).get_json()
    assert change["estimate_kind"] == "record"
    rows = {row["value"]: row for row in change["rows"]}
    assert list(rows) == labels
    # The planted change: mac +0.2 and windows -0.2 (standard errors about 0.03).
    assert rows["os=mac"]["significant"] and rows["os=mac"]["difference"] > 0.1
    assert rows["os=windows"]["significant"] and rows["os=windows"]["difference"] < -0.1


@pytest.mark.parametrize(("query", "detail"), [
    ("joint=browser,colour", "unknown attribute(s) ['colour']"),
    ("joint=browser,os,crashed", "2 to 2 distinct attributes"),
    ("joint=browser", "2 to 2 distinct attributes"),
    ("joint=browser,browser", "2 to 2 distinct attributes"),
    ("joint=", "unknown attribute(s) ['']"),
    ("postprocessing=ems", "postprocessing must be one of"),
    ("quantiles=0.5", "distribution campaigns"),
    ("candidate=chrome", "open strings"),
    ("joints=browser,os", "unknown query parameters ['joints']"),
    ("&".join(["joint=browser,os"] * 46), "at most 45 joints"),
])
def test_bad_record_questions_are_problems(http: FlaskClient, records: dict[str, Any],
                                           query: str, detail: str) -> None:
    reply = http.get(f"/v1/campaigns/crashes/estimates?{query}", headers=ANALYST_HEADERS)
    assert reply.status_code == 400, reply.get_data(as_text=True)
    assert reply.mimetype == "application/problem+json"
    problem = reply.get_json()
    assert problem["type"].endswith("/invalid-query") and detail in problem["detail"], problem


@pytest.mark.parametrize(("body", "detail"), [
    ({"joints": "browser,os"}, "joints is a list of attribute lists"),
    ({"joints": [[1, 2]]}, "a joint lists attribute names"),
    ({"joints": [{"browser": "os"}]}, "a joint lists attribute names"),
    ({"joints": [["browser", "os"]], "joint": ["a"]}, "unknown fields ['joint']"),
    ([["browser", "os"]], "send a JSON object"),
])
def test_malformed_bodies_are_problems(http: FlaskClient, records: dict[str, Any],
                                       body: Any, detail: str) -> None:
    reply = http.post("/v1/campaigns/crashes/estimates", headers=ANALYST_HEADERS, json=body)
    assert reply.status_code == 400, reply.get_data(as_text=True)
    assert reply.mimetype == "application/problem+json"
    problem = reply.get_json()
    assert problem["type"].endswith("/invalid-query") and detail in problem["detail"], problem


def test_joints_are_refused_where_none_is_collected(http: FlaskClient,
                                                   clock: FakeClock) -> None:
    """An smp record campaign answers marginals only; a campaign over categories has no
    attributes to join."""
    smp = {**SPEC, "name": "sampled", "mechanism": "smp", "min_batch_size": 1}
    krr = {"name": "plain", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b"],
           "min_batch_size": 1, "privacy": SPEC["privacy"]}
    transport = WSGITransport(http.application)
    configs = {}
    for spec in (smp, krr):
        assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
        configs[spec["name"]] = http.get(f"/v1/campaigns/{spec['name']}").get_json()
    client = Client(URL, ephemeral=True, transport=transport, campaigns=configs,
                    rng=random.Random(3), allow_insecure_rng=True, lifetime_budget=math.inf,
                    max_epsilon=math.inf, clock=clock, send_delay=0.0)
    rng = np.random.default_rng(4)
    for record in _records(0, 50, rng):
        assert client.report("sampled", record) == "queued"
        assert client.report("plain", "a") == "queued"
    client.flush()
    answer = _get_named(http, "sampled", "")
    assert answer["kind"] == "record" and answer["joints"] == []
    assert sum(m["reports"] for m in answer["marginals"]) == 50  # one attribute per report
    for name, detail in (("sampled", "estimates each attribute's marginal only"),
                         ("plain", "joints apply to record campaigns only")):
        for reply in (http.get(f"/v1/campaigns/{name}/estimates?joint=browser,os",
                               headers=ANALYST_HEADERS),
                      http.post(f"/v1/campaigns/{name}/estimates", headers=ANALYST_HEADERS,
                                json={"joints": [["browser", "os"]]})):
            assert reply.status_code == 400 and reply.mimetype == "application/problem+json"
            assert detail in reply.get_json()["detail"]
    assert http.get("/v1/campaigns/sampled/estimates?postprocessing=consistent",
                    headers=ANALYST_HEADERS).status_code == 400


def _get_named(http: FlaskClient, name: str, query: str) -> dict[str, Any]:
    reply = http.get(f"/v1/campaigns/{name}/estimates{query}", headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body
