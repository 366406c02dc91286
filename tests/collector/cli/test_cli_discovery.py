"""``chorus estimates``, ``series``, ``compare`` and ``campaign show`` on a discovery campaign,
against the in-process collector: the table lists what the walk found with the API's numbers
and a detected column, says what the walk did and how false positives are controlled;
``--candidate`` re-estimates a list (the second stage); bad candidates fail in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import CollectorAPI, WSGITransport
from chorus_collector.cli import analysis as analysis_cli
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from chorus_collector.results.tables import format_instant, shown_value
from chorus_collector.storage import Storage
from helpers.discoveryseed import HOUR, SPEC, T0, WORDS, seed_folded
from helpers.support import ADMIN_HEADERS, ANALYST, ANALYST_HEADERS

Chorus = Callable[..., Result]
URL = "http://collector.test"


@pytest.fixture
def chorus(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Chorus:
    """``chorus ARGS`` against the in-process collector, with the analyst's token."""
    transport = WSGITransport(app)
    for module in (campaigns_cli, analysis_cli):
        monkeypatch.setattr(module, "collector_api", lambda url, token: CollectorAPI(
            url, token, transport=transport))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={"CHORUS_URL": URL,
                                                        "CHORUS_TOKEN": ANALYST})

    return invoke


@pytest.fixture
def searches(app: Flask, http: FlaskClient) -> str:
    reply = http.post("/v1/campaigns", json=SPEC, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    storage: Storage = app.extensions["chorus.storage"]
    stored = storage.get_campaign(SPEC["name"])
    assert stored is not None
    seed_folded(storage, stored)
    return str(SPEC["name"])


def _api(http: FlaskClient, path: str, **query: Any) -> dict[str, Any]:
    reply = http.get(path, headers=ANALYST_HEADERS, query_string=query)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def _row_line(lines: list[str], value: str) -> str:
    label = shown_value(value)
    return next(line for line in lines if line.startswith(f"  {label} "))


def test_estimates_list_what_was_discovered_with_the_apis_numbers(
        chorus: Chorus, http: FlaskClient, searches: str) -> None:
    result = chorus("estimates", searches)
    assert result.exit_code == 0, result.output
    api = _api(http, f"/v1/campaigns/{searches}/estimates")
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{searches}: pem, ε = 4, n = 60000")
    reports = ", ".join(f"{step['reports']:,}" for step in api["extra"]["discovery"]["steps"])
    assert lines[1] == (f"  discovered by PEM's walk, without candidates: 3 steps at prefixes "
                        f"of 8, 16, 24 bits; reports per group {reports}; kept per step "
                        f"16, 16, 16")
    final = api["extra"]["discovery"]["final_reports"]
    tested = api["extra"]["discovery"]["values_tested"]
    assert lines[2] == (f"  frequencies from {final:,} reports of the estimation group (never "
                        "read by the walk); detected: Holm's one-sided z-tests, family-wise "
                        f"false-positive rate 0.05 over the {tested} values tested")
    assert lines[3].split() == ["value", "estimate", "std", "err", "95%", "interval",
                                "detected"]
    assert len(lines) == 4 + len(api["rows"])
    for row in api["rows"]:
        cells = _row_line(lines, row["value"]).split()
        assert cells[-5:] == [f"{row['frequency']:.4f}", f"{row['frequency_std_error']:.4f}",
                              f"[{row['frequency_ci_low']:.4f},",
                              f"{row['frequency_ci_high']:.4f}]",
                              "yes" if row["detected"] else "no"]
    assert {row["value"] for row in api["rows"] if row["detected"]} == set(WORDS)
    # A value with a control character prints as a JSON string, never raw.
    assert _row_line(lines, "a\tb").startswith('  "a\\tb" ')
    assert "\t" not in result.output


def test_candidates_are_re_estimated(chorus: Chorus, http: FlaskClient, searches: str) -> None:
    result = chorus("estimates", searches, "--candidate", "zoo", "--candidate", "xyz")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == "  second stage: the 2 values listed, re-estimated by PEM without a walk"
    assert "over the 2 values tested" in lines[2]
    reply = http.post(f"/v1/campaigns/{searches}/estimates",
                      json={"candidates": ["zoo", "xyz"]}, headers=ANALYST_HEADERS)
    for row in reply.get_json()["rows"]:
        cells = _row_line(lines, row["value"]).split()
        assert cells[1] == f"{row['frequency']:.4f}"
        assert cells[-1] == ("yes" if row["detected"] else "no")
    as_json = chorus("estimates", searches, "--candidate", "zoo", "--candidate", "xyz",
                     "--format", "json")
    assert json.loads(as_json.output)["rows"] == reply.get_json()["rows"]


@pytest.mark.parametrize(("candidate", "why"), [
    ("toolong", "invalid-candidate: candidate 'toolong': value is longer than 3 UTF-8 bytes"),
    ("a\0", "invalid-candidate: candidate 'a\\x00': a discovery campaign's values cannot "
            "contain NUL"),
])
def test_bad_candidates_fail_in_one_line(chorus: Chorus, searches: str, candidate: str,
                                         why: str) -> None:
    result = chorus("estimates", searches, "--candidate", candidate)
    assert result.exit_code == 1
    assert result.output == f"Error: 422 {why}\n"


def test_series_and_compare_say_which_values_they_track(chorus: Chorus, http: FlaskClient,
                                                        searches: str) -> None:
    series = chorus("series", searches, "--top", "2")
    assert series.exit_code == 0, series.output
    lines = series.output.splitlines()
    api = _api(http, f"/v1/campaigns/{searches}/series", top=2)
    assert lines[1] == ("  values: the 8 that PEM's walk discovers over the whole window "
                        "(60,000 reports), re-estimated in every point")
    assert [s["value"] for s in api["series"]] == ["cat", "dog"]
    first = api["series"][0]["points"][0]
    assert lines[3].split()[:4] == ["cat", format_instant(T0), str(first["n"]),
                                    f"{first['estimate']:.4f}"]
    compare = chorus("compare", searches, "--baseline-start", str(T0), "--baseline-end",
                     str(T0 + HOUR), "--start", str(T0 + HOUR), "--end", str(T0 + 3 * HOUR))
    assert compare.exit_code == 0, compare.output
    assert ("  values: the 8 that PEM's walk discovers over both windows together (60,000 "
            "reports), re-estimated in each") in compare.output.splitlines()


def test_campaign_show_prints_the_auto_selection(chorus: Chorus, http: FlaskClient) -> None:
    spec = {"name": "found", "mechanism": "auto", "epsilon": 1.0,
            "domain": {"kind": "strings", "max_bytes": 64}}
    assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    result = chorus("campaign", "show", "found")
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)
    assert config["mechanism"] in ("pem", "treehist")
    assert config["selection"]["from"] == "auto"
    assert config["selection"]["reason"].startswith("TreeHist's final standard error is")


def test_the_demo_prints_what_was_found_beside_the_truth(http: FlaskClient,
                                                         searches: str) -> None:
    from chorus_collector.cli.demo import _print_results

    body = _api(http, f"/v1/campaigns/{searches}/estimates")
    truth = {"cat": 0.3, "dog": 0.25, "é": 0.2, "a\tb": 0.15, "zoo": 0.1 - 1e-3,
             "missing": 1e-3}
    lines: list[str] = []
    covered, total = _print_results({searches: body}, {searches: truth}, lines.append)
    assert total == len(body["rows"])  # every value listed is counted, at its truth (or 0)
    assert covered == sum(row["frequency_ci_low"] <= truth.get(row["value"], 0.0)
                          <= row["frequency_ci_high"] for row in body["rows"])
    text = "\n".join(lines)
    assert "  discovered by PEM's walk, without candidates" in text
    assert _row_line(text.splitlines(), "cat").split()[1] == "0.3000"  # the true column
    assert text.splitlines()[-1] == (
        '  the 6 most frequent in truth: cat 0.300 (found, detected); dog 0.250 (found, '
        'detected); é 0.200 (found, detected); "a\\tb" 0.150 (found, detected); zoo 0.099 '
        '(found, detected); missing 0.001 (missed)')


def test_the_demo_app_plans_one_report_to_each_campaign_within_the_default_budget() -> None:
    """Each simulated install reports once to every demo campaign, at the client's default
    caps: the app's plan gives each campaign one report's ε and sums to the default lifetime
    budget, so no report is suppressed."""
    from chorus_client import Client
    from chorus_client.client import DEFAULT_LIFETIME_BUDGET
    from chorus_collector.cli.demo import DEMO_CAMPAIGNS, DEMO_PLAN
    from chorus_shared import campaign_from_spec

    campaigns = {spec["name"]: campaign_from_spec(spec) for spec in DEMO_CAMPAIGNS}
    assert {name: c.epsilon for name, c in campaigns.items()} == pytest.approx(DEMO_PLAN)
    assert sum(DEMO_PLAN.values()) == pytest.approx(DEFAULT_LIFETIME_BUDGET)
    client = Client("http://unused.test", ephemeral=True, campaigns=campaigns, plan=DEMO_PLAN)
    assert all(part.reports == 1 for part in client.plan())
    assert "search" in campaigns
