"""``chorus estimates`` for a record campaign: each attribute's marginal, then each joint cell
by cell with both conditionals and the test of independence, the numbers being the API's;
``--joint`` (repeatable) asks for joints, ``--postprocessing consistent`` makes them agree, and
``--format csv`` is the collector's CSV. The CLI runs against an in-process collector."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import CollectorAPI, WSGITransport
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from chorus_shared import campaign_from_config
from chorus_shared.wire import new_report
from helpers.support import ADMIN_HEADERS, ANALYST, NOW

URL = "http://collector.test"
ATTRIBUTES = {"browser": ["chrome", "firefox", "safari"], "os": ["linux", "mac"],
              "crashed": ["no", "yes"]}


def _spec(name: str, mechanism: str) -> dict[str, Any]:
    return {"name": name, "mechanism": mechanism, "epsilon": 2.0, "min_batch_size": 1,
            "domain": {"kind": "record", "attributes": [
                {"name": n, "values": v} for n, v in ATTRIBUTES.items()]},
            "privacy": {"budget": 1e6, "max_reports": 10**6}}


def _seed(http: FlaskClient, spec: dict[str, Any], n: int = 2000) -> None:
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    campaign = campaign_from_config(reply.get_json())
    mechanism = campaign.mechanism
    rng = random.Random(7)
    reports = []
    for _ in range(n):
        browser = rng.choices(ATTRIBUTES["browser"], [0.6, 0.3, 0.1])[0]
        record = {"browser": browser, "os": rng.choice(ATTRIBUTES["os"]),
                  "crashed": "yes" if rng.random() < (0.3 if browser == "safari" else 0.1)
                  else "no"}
        payload = mechanism.randomize(mechanism.encode(record), rng)
        reports.append(new_report(campaign, payload, NOW).to_json())
    body = http.post(f"/v1/campaigns/{spec['name']}/reports", json={"reports": reports})
    assert body.get_json()["accepted"] == n


@pytest.fixture
def chorus(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(campaigns_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=WSGITransport(app)))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={"CHORUS_URL": URL,
                                                        "CHORUS_TOKEN": ANALYST})

    return invoke


@pytest.fixture
def api(app: Flask, http: FlaskClient) -> CollectorAPI:
    _seed(http, _spec("crashes", "marginals"))
    return CollectorAPI(URL, ANALYST, transport=WSGITransport(app))


def _conditional(cell: dict[str, Any]) -> str:
    """A conditional's cell as the table prints it: the share and interval, or the words."""
    if not cell["estimable"]:
        return "not estimable at this n"
    return f"{cell['frequency']:.4f} {_interval(cell)}"


def _interval(cell: dict[str, Any]) -> str:
    return rf"\[{cell['ci_low']:.4f}, {cell['ci_high']:.4f}\]"


def test_marginals_then_each_pair_with_conditionals_and_the_test(
        chorus: Any, api: CollectorAPI) -> None:
    result = chorus("estimates", "crashes")
    assert result.exit_code == 0, result.output
    out = result.output
    body = api.estimates("crashes")
    assert out.splitlines()[0].startswith("crashes: marginals, ε = 2, n = 2000")
    for marginal in body["marginals"]:
        assert f"  {marginal['attribute']} ({marginal['reports']:,} reports)" in out
        for row in marginal["rows"]:
            assert re.search(rf"\n    {row['value']} +{row['frequency']:.4f} +"
                             rf"{row['std_error']:.4f} +{_interval(row)}\n", out), row
    assert [j["attributes"] for j in body["joints"]] == [
        ["browser", "os"], ["browser", "crashed"], ["os", "crashed"]]
    for joint in body["joints"]:
        first, second = joint["attributes"]
        assert f"  joint of {first} × {second} ({joint['reports']:,} reports)" in out
        assert re.search(rf"P\({second} \| {first}\) +P\({first} \| {second}\)", out)
        of_second, of_first = joint["conditionals"]
        for index, cell in enumerate(joint["cells"]):
            a, b = cell["values"]
            # The row (a, b): P(a, b), then P(b | a), then P(a | b).
            given_a = of_second["cells"][index]
            given_b = next(c for c in of_first["cells"]
                           if (c["given_value"], c["value"]) == (b, a))
            assert re.search(rf"\n    {a} +{b} +{cell['frequency']:.4f} +"
                             rf"{cell['std_error']:.4f} +{_interval(cell)} +"
                             rf"{_conditional(given_a)} +{_conditional(given_b)}\n", out), cell
        test = joint["independence"]
        powers = ", ".join(f"{p['power']:.2f} at w = {p['cohens_w']:g}" for p in test["power"])
        assert f"power against an association of Cohen's w: {powers}" in out
        verdict = "rejected" if test["reject_at_0.05"] else "not rejected"
        assert (f"independence: χ² = {test['statistic']:.4g}, df = {test['df']}, p = "
                f"{test['p_value']:.4g} ({verdict} at 0.05); {test['method']}") in out


def test_joint_and_postprocessing_options(chorus: Any, api: CollectorAPI) -> None:
    result = chorus("estimates", "crashes", "--joint", "crashed,browser", "--joint", "os,crashed",
                    "--postprocessing", "consistent")
    assert result.exit_code == 0, result.output
    assert "post-processing consistent" in result.output.splitlines()[0]
    joints = re.findall(r"\n  joint of (.*) \(", result.output)
    assert joints == ["crashed × browser", "os × crashed"]
    body = api.estimates("crashes", joints=[("crashed", "browser"), ("os", "crashed")],
                         postprocessing="consistent")
    for cell in body["joints"][0]["cells"]:
        a, b = cell["values"]
        assert re.search(rf"\n    {a} +{b} +{cell['frequency']:.4f} ", result.output)
    csv = chorus("estimates", "crashes", "--joint", "os,crashed", "--format", "csv")
    assert csv.exit_code == 0, csv.output
    assert csv.output.splitlines() == api.estimates_csv(
        "crashes", joints=[("os", "crashed")]).splitlines()
    assert csv.output.count("\njoint,os|crashed,") == 4


@pytest.mark.parametrize(("args", "message"), [
    (["--joint", "browser"], "expected attribute names A,B"),
    (["--joint", "browser,"], "expected attribute names A,B"),
    (["--joint", "browser,colour"], "unknown attribute(s) ['colour']"),
    (["--joint", "browser,os,crashed"], "a joint names 2 to 2 distinct attributes"),
    (["--postprocessing", "ems"], "postprocessing must be one of"),
])
def test_bad_joint_options_say_why(chorus: Any, api: CollectorAPI, args: list[str],
                                   message: str) -> None:
    result = chorus("estimates", "crashes", *args)
    assert result.exit_code != 0
    assert message in result.output


def test_a_campaign_of_marginals_only(chorus: Any, http: FlaskClient) -> None:
    """smp: the marginals, no joint; asking for one is the collector's refusal."""
    _seed(http, _spec("sampled", "smp"), n=600)
    result = chorus("estimates", "sampled")
    assert result.exit_code == 0, result.output
    assert "joint of" not in result.output and "  os (" in result.output
    refused = chorus("estimates", "sampled", "--joint", "browser,os")
    assert refused.exit_code != 0
    assert "estimates each attribute's marginal only" in refused.output


def test_the_demo_prints_a_record_campaign(api: CollectorAPI) -> None:
    """The demo's report prints a record answer, counting its marginals' coverage when it is
    given the truth (attribute=value → share) and printing it without."""
    from chorus_collector.cli.demo import _print_results

    body = api.estimates("crashes")
    lines: list[str] = []
    assert _print_results({"crashes": body}, {}, lines.append) == (0, 0)
    assert "joint of browser × os" in "\n".join(lines)
    shares = {f"{m['attribute']}={r['value']}": r["frequency"] for m in body["marginals"]
              for r in m["rows"]}
    shares["browser=chrome"] += 1.0  # outside its interval
    assert _print_results({"crashes": body}, {"crashes": shares}, lines.append) == (6, 7)
