"""``chorus campaign create|show|list`` say how one install reports and when
(``Campaign.reporting``), and the worst case with the client's lifetime budget that caps it;
``chorus series`` of a campaign with a schedule goes per period and says what each point
estimates."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import CollectorAPI, WSGITransport
from chorus_collector.cli import analysis as analysis_cli
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from chorus_shared.campaign import campaign_from_spec
from helpers.support import ADMIN, NOW, FakeClock, make_report

Chorus = Callable[..., Result]
DAY = 86400
SCHEDULED = {"name": "daily", "mechanism": "krr", "epsilon": 2.0, "domain": ["a", "b"],
             "min_batch_size": 5, "privacy": {"budget": 8.0},
             "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 365}}
PLAIN = {"name": "plain", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b"],
         "privacy": {"unit": "day"}}


@pytest.fixture
def chorus(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Chorus:
    """``chorus ARGS`` against the in-process collector, with the admin's token."""
    for module in (campaigns_cli, analysis_cli):
        monkeypatch.setattr(module, "collector_api", lambda url, token: CollectorAPI(
            url, token, transport=WSGITransport(app)))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={"CHORUS_URL": "http://collector.test",
                                                        "CHORUS_TOKEN": ADMIN})

    return invoke


def _create(chorus: Chorus, tmp_path: Path, spec: dict[str, Any]) -> Result:
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    result = chorus("campaign", "create", "--json", str(path))
    assert result.exit_code == 0, result.output
    return result


def test_create_show_and_list_say_how_one_install_reports(chorus: Chorus,
                                                          tmp_path: Path) -> None:
    scheduled = campaign_from_spec(SCHEDULED).reporting
    plain = campaign_from_spec(PLAIN).reporting
    created = _create(chorus, tmp_path, SCHEDULED)
    assert f"reporting: {scheduled}" in created.stderr
    assert scheduled.startswith("4 reports per install over 365 days from 2026-01-01 to "
                                "2026-12-31, in days drawn at random on the device")
    assert json.loads(created.stdout)["name"] == "daily"  # stdout stays the config alone
    _create(chorus, tmp_path, PLAIN)
    shown = chorus("campaign", "show", "plain")
    assert shown.exit_code == 0
    assert f"reporting: {plain}" in shown.stderr
    assert plain == ("at most 1 report per install per UTC day at ε = 1 each, until the "
                     "install's lifetime budget is spent")
    # The campaign's own "366 in any 365 days" comes with the client's cap beside it.
    assert "ε = 366 in any 365 days by the campaign's own policy; the client's lifetime " \
        "budget (8 by default, for all of the app's campaigns) caps it at 8 reports, ε = 8 " \
        "in all" in shown.stderr
    assert "caps it at 4 reports, ε = 8 in all" in created.stderr  # 4 of 2: the schedule's
    listed = chorus("campaign", "list").output.splitlines()
    assert listed[0].split() == ["NAME", "MECHANISM", "ε", "DOMAIN", "DIGEST", "STATE"]
    assert listed[1].split()[:3] == ["daily", "krr", "2"] and listed[2] == f"    {scheduled}"
    assert listed[3].startswith("plain") and listed[4] == f"    {plain}"


def test_create_says_in_one_line_what_it_did_and_again_that_nothing_changed(
        chorus: Chorus, tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(PLAIN))
    assert chorus("campaign", "list").output == \
        "no campaigns yet: `chorus campaign create SPEC.json` makes one\n"
    first = chorus("campaign", "create", str(path))
    digest = campaign_from_spec(PLAIN).public_config()["digest"]
    assert first.exit_code == 0 and first.stdout == (
        f"created campaign 'plain' (krr, ε = 1, digest {digest[:12]}); "
        "`chorus campaign show plain` prints the config to ship\n")
    again = chorus("campaign", "create", str(path))
    assert again.exit_code == 0 and again.stdout == (
        f"campaign 'plain' already exists with this definition (krr, ε = 1, digest "
        f"{digest[:12]}): nothing changed\n")
    assert "worst case for one install" in again.stderr  # the privacy lines either way
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**PLAIN, "epsilon": 2.0}))
    refused = chorus("campaign", "create", str(changed))
    assert refused.exit_code == 1 and "a different campaign is already named 'plain'" in \
        refused.output


def test_counts_agree_with_their_nouns() -> None:
    from chorus_collector.cli.common import counted

    assert counted(1, "report") == "1 report"
    assert counted(0, "report") == "0 reports"
    assert counted(20000, "report") == "20,000 reports"
    assert counted(1, "batch", "batches") == "1 batch"
    assert counted(3, "batch", "batches") == "3 batches"
    one = {"per_report": 8.0, "reports_per_period": 1, "per_period": 8.0,
           "per_365_days": 8.0}
    line = campaigns_cli.worst_case_line({"worst_case": one, "privacy": {"unit": "lifetime"}})
    assert "1 report and ε = 8 in its lifetime" in line and "caps it at 1 report," in line
    assert "1 reports" not in line


def test_a_config_alone_still_says_how_it_reports() -> None:
    config = campaign_from_spec(SCHEDULED).public_config()
    assert campaigns_cli.reporting_of(config) == campaign_from_spec(SCHEDULED).reporting
    plain = campaign_from_spec(PLAIN).public_config()
    assert campaigns_cli.reporting_of({**plain, "retired_at": 5.0}) == \
        campaign_from_spec(PLAIN).reporting
    broken = campaigns_cli.reporting_of({**plain, "mechanism": "nope"})
    assert broken.startswith("(how often it reports cannot be read from this config: ")


def test_series_of_a_scheduled_campaign_goes_per_period(chorus: Chorus, tmp_path: Path,
                                                        http: FlaskClient,
                                                        clock: FakeClock) -> None:
    config = json.loads(_create(chorus, tmp_path, SCHEDULED).stdout)
    clock.now = NOW + 2 * DAY + 60
    rng = random.Random(2)
    reports = [make_report(config, rng.choice("ab"), rng, now=NOW + 600) for _ in range(20)]
    assert http.post("/v1/reports", json={"reports": reports}).status_code == 200
    result = chorus("series", "daily", "--value", "a")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "step period (1 d)" in lines[0]
    assert lines[1].startswith("  each point: each value's share among the installs active in "
                               "that day (each install active in a day reports in it with "
                               "probability r/T = 4/365")
    assert sum("(suppressed: no reports in this interval)" in line for line in lines) == 2
    table = chorus("estimates", "daily", "--start", "2026-01-01", "--end", "2026-01-02")
    assert "  estimates each value's share among the installs active in the day from " \
        "2026-01-01" in table.output
