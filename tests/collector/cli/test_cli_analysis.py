"""``chorus series`` and ``chorus compare`` against the in-process collector: the numbers the
table, JSON and CSV print are the API's, windows print in ISO 8601 UTC, ``--last`` compares
the last window with the one before it, and bad input fails in one line."""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import CollectorAPI, WSGITransport
from chorus_client.api import MAX_GET_URL
from chorus_collector.cli import analysis as analysis_cli
from chorus_collector.cli import main as cli
from chorus_collector.cli import timespec
from helpers.support import ADMIN_HEADERS, ANALYST, NOW, FakeClock, campaign_spec, make_report

Chorus = Callable[..., Result]
HOUR = 3600
URL = "http://collector.test"
LONG = "https://shop.example.com/catalog/garden/tools/rakes?sort=price&page=2&utm=newsletter"


@pytest.fixture
def transport(app: Flask) -> WSGITransport:
    return WSGITransport(app)


@pytest.fixture
def api(transport: WSGITransport) -> CollectorAPI:
    return CollectorAPI(URL, ANALYST, transport=transport)


@pytest.fixture
def chorus(transport: WSGITransport, monkeypatch: pytest.MonkeyPatch) -> Chorus:
    """``chorus ARGS`` against the in-process collector, with the analyst's token."""
    monkeypatch.setattr(analysis_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=transport))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={"CHORUS_URL": URL,
                                                        "CHORUS_TOKEN": ANALYST})

    return invoke


def _submit(http: FlaskClient, config: dict[str, Any], values: list[Any], rng: random.Random,
            when: float) -> None:
    reports = [make_report(config, value, rng, now=when) for value in values]
    body = http.post("/v1/reports", json={"reports": reports}).get_json()
    assert body["accepted"] == len(values), body


@pytest.fixture
def three_hours(http: FlaskClient, clock: FakeClock, rng: random.Random) -> dict[str, Any]:
    """A k-RR campaign (hourly buckets, min_batch_size 10, a long value): 400 reports in
    the first hour, none in the second, 400 in the third (where "a" takes over); the clock
    at the end of the third hour."""
    spec = campaign_spec("survey", domain=["a", "b", "c", LONG], epsilon=4.0,
                         min_batch_size=10)
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config: dict[str, Any] = reply.get_json()
    clock.now = NOW + 3 * HOUR
    _submit(http, config, ["a", "b", "c", LONG] * 100, rng, when=NOW)
    _submit(http, config, ["a"] * 300 + ["b", "c", LONG] * 33 + ["a"], rng, when=NOW + 2 * HOUR)
    return config


def _ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout



def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _joined(output: str) -> str:
    """The table with every continued value joined back onto its row's value."""
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith("↳ ") and lines:
            head = lines[-1]
            cut = head.index("  ", 2)  # the value ends where the two-space gap starts
            lines[-1] = head[:cut] + line[2:] + head[cut:]
        else:
            lines.append(line)
    return "\n".join(lines)


WINDOW = ("--start", "2026-01-01", "--end", "2026-01-01T03:00")
WINDOWS = ("--baseline-start", "2026-01-01", "--baseline-end", "2026-01-01T01:00",
           "--start", "2026-01-01T02:00", "--end", "2026-01-01T03:00")
BOUNDS = {"baseline_start": int(NOW), "baseline_end": int(NOW) + HOUR,
          "start": int(NOW) + 2 * HOUR, "end": int(NOW) + 3 * HOUR}


# -- series --------------------------------------------------------------------------------------


def test_series_table_prints_the_apis_numbers(chorus: Chorus, api: CollectorAPI,
                                              three_hours: dict[str, Any]) -> None:
    output = _ok(chorus("series", "survey", *WINDOW))
    expected = api.series("survey", start=int(NOW), end=int(NOW) + 3 * HOUR)
    header, *_ = output.splitlines()
    assert header == ("survey: krr, ε = 4; step bucket (1 h); window [2026-01-01T00:00Z, "
                      "2026-01-01T03:00Z); variance model iid-sampling")
    rows = [line for line in _joined(output).splitlines() if "2026-01-01T" in line][1:]
    assert len(rows) == 4 * 3
    for series, first in zip(expected["series"], range(0, 12, 3), strict=True):
        assert rows[first].split()[0] == series["value"]  # whole, the long one too
        for point, row in zip(series["points"], rows[first:first + 3], strict=True):
            assert f"{point['n']:>8}" in row
            if point["suppressed"]:
                assert "(suppressed: " in row and point["estimate"] is None
            else:
                numbers = (f"{point['estimate']:.4f}", f"{point['std_error']:.4f}",
                           f"[{point['ci_low']:.4f}, {point['ci_high']:.4f}]")
                assert all(number in row for number in numbers), row
    assert "4 point(s) suppressed" in output
    assert "↳ " in output  # the long value continues below its row, not cut


def test_series_json_and_csv_are_the_apis(chorus: Chorus, api: CollectorAPI,
                                          three_hours: dict[str, Any]) -> None:
    window = {"start": int(NOW), "end": int(NOW) + 3 * HOUR}
    assert json.loads(_ok(chorus("series", "survey", *WINDOW, "--format", "json"))) \
        == api.series("survey", **window)
    assert _rows(_ok(chorus("series", "survey", *WINDOW, "--format", "csv"))) \
        == _rows(api.series_csv("survey", **window))
    by_day = json.loads(_ok(chorus("series", "survey", "--step", "day", "--value", "a",
                                   "--value", "b", "--format", "json")))
    assert by_day == api.series("survey", step="day", values=["a", "b"])
    assert [s["value"] for s in by_day["series"]] == ["a", "b"]
    assert by_day["step_name"] == "day"
    two_hours = json.loads(_ok(chorus("series", "survey", *WINDOW, "--step", "2h", "--top",
                                      "1", "--format", "json")))
    assert two_hours == api.series("survey", **window, step=7200, top=1)
    assert [s["value"] for s in two_hours["series"]] == ["a"]
    assert two_hours["step"] == 7200


def test_series_last_aligns_to_the_time_precision(chorus: Chorus, api: CollectorAPI,
                                                  three_hours: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timespec, "time", SimpleNamespace(time=lambda: NOW + 3 * HOUR - 600))
    result = chorus("series", "survey", "--last", "2h", "--format", "json")
    assert json.loads(_ok(result)) == api.series("survey", start=int(NOW),
                                                 end=int(NOW) + 3 * HOUR)


def test_series_last_is_widened_to_whole_steps(chorus: Chorus, api: CollectorAPI,
                                               three_hours: dict[str, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timespec, "time", SimpleNamespace(time=lambda: NOW + 3 * HOUR - 600))
    # [00:50, 02:50) → whole two-hour points [00:00, 04:00)
    result = chorus("series", "survey", "--last", "2h", "--step", "2h", "--format", "json")
    assert json.loads(_ok(result)) == api.series("survey", start=int(NOW),
                                                 end=int(NOW) + 4 * HOUR, step=7200)
    assert ("window [2026-01-01T00:00Z, 2026-01-01T04:00Z): whole points of the step (7200) "
            "from [2026-01-01T00:50Z, 2026-01-01T02:50Z)") in result.stderr
    days = json.loads(_ok(chorus("series", "survey", "--last", "1h", "--step", "day",
                                 "--format", "json")))
    assert days["window"] == {"start": int(NOW), "end": int(NOW) + 24 * HOUR}


def test_series_table_marks_partial_points(chorus: Chorus, three_hours: dict[str, Any]) -> None:
    output = _ok(chorus("series", "survey", *WINDOW, "--step", "2h", "--value", "a"))
    first, second = (line for line in output.splitlines() if "2026-01-01T0" in line
                     and "window" not in line)
    assert "partial" not in first
    assert second.endswith("(partial: 1 h of the step)")


# -- compare -------------------------------------------------------------------------------------


def test_compare_table_prints_the_apis_numbers(chorus: Chorus, api: CollectorAPI,
                                               three_hours: dict[str, Any]) -> None:
    output = _ok(chorus("compare", "survey", *WINDOWS))
    expected = api.compare("survey", **BOUNDS)
    lines = _joined(output).splitlines()
    assert lines[0] == ("survey: krr, ε = 4; baseline [2026-01-01T00:00Z, 2026-01-01T01:00Z), "
                        "n = 400; current [2026-01-01T02:00Z, 2026-01-01T03:00Z), n = 400")
    assert "Benjamini–Hochberg (false discovery rate) across 4 values" in lines[1]
    rows = lines[3:3 + len(expected["rows"])]
    for row, line in zip(expected["rows"], rows, strict=True):
        assert line.split()[0] == row["value"]
        numbers = (f"{row['baseline_estimate']:.4f}", f"{row['current_estimate']:.4f}",
                   f"{row['difference']:+.4f}", f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
                   f"{row['p_value']:.3g}", f"{row['adjusted_p_value']:.3g}")
        assert all(number in line for number in numbers), line
        assert line.endswith("* significant") == row["significant"]
    assert sum(row["significant"] for row in expected["rows"]) >= 1  # "a" tripled


def test_compare_json_and_csv_are_the_apis(chorus: Chorus, api: CollectorAPI,
                                           three_hours: dict[str, Any]) -> None:
    options = ("--correction", "bonferroni", "--alpha", "0.01")
    answer = json.loads(_ok(chorus("compare", "survey", *WINDOWS, *options, "--format", "json")))
    assert answer == api.compare("survey", **BOUNDS, correction="bonferroni", alpha=0.01)
    assert answer["correction"] == "bonferroni" and answer["alpha"] == 0.01
    assert _rows(_ok(chorus("compare", "survey", *WINDOWS, *options, "--format", "csv"))) \
        == _rows(api.compare_csv("survey", **BOUNDS, correction="bonferroni", alpha=0.01))
    table = _ok(chorus("compare", "survey", *WINDOWS, *options))
    assert "Bonferroni (family-wise error rate)" in table and "α = 0.01" in table


def test_compare_last_is_the_last_window_against_the_one_before(
        chorus: Chorus, api: CollectorAPI, three_hours: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timespec, "time", SimpleNamespace(time=lambda: NOW + 3 * HOUR))
    # [01:30, 03:00) aligned to [01:00, 03:00): the baseline is the two hours before it.
    result = chorus("compare", "survey", "--last", "90m", "--format", "json")
    answer = json.loads(_ok(result))
    assert answer == api.compare("survey", baseline_start=int(NOW) - HOUR,
                                 baseline_end=int(NOW) + HOUR, start=int(NOW) + HOUR,
                                 end=int(NOW) + 3 * HOUR)
    assert (answer["baseline"]["n"], answer["current"]["n"]) == (400, 400)
    assert "baseline [2025-12-31T23:00Z, 2026-01-01T01:00Z), current [2026-01-01T01:00Z, " \
        "2026-01-01T03:00Z)" in result.stderr


# -- errors and the client -----------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["compare", "survey"], "say which windows to compare"),
    (["compare", "survey", "--last", "7d", "--baseline-start", "2026-01-01"],
     "--last cannot be combined with --baseline-start"),
    (["compare", "survey", "--last", "7d", "--start", "2026-01-01"],
     "--last cannot be combined with --start"),
    (["compare", "survey", "--baseline-start", "2026-01-02", "--baseline-end", "2026-01-01"],
     "--baseline-end (2026-01-01T00:00Z) must be after --baseline-start"),
    (["compare", "survey", "--baseline-start", "2026-01-01", "--baseline-end",
      "2026-01-01T02:00", "--start", "2026-01-01T01:00"], "overlap"),
    (["compare", "survey", *WINDOWS, "--alpha", "1.5"], "--alpha"),
    (["compare", "nope", *WINDOWS], "nope"),
    (["series", "survey", "--step", "fortnightly"], "'fortnightly': use period, bucket, day, week"),
    (["series", "survey", "--step", "90m"], "multiple"),
    (["series", "survey", "--top", "0"], "--top"),
    (["series", "survey", "--value", "zebra"], "zebra"),
    (["series", "survey", "--candidate", "x"], "candidates apply to campaigns over open"),
])
def test_errors_are_one_line(chorus: Chorus, three_hours: dict[str, Any], args: list[str],
                             message: str) -> None:
    result = chorus(*args)
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and message in error[0], result.output
    assert "Traceback" not in result.output


def test_client_asks_by_get_and_by_post_when_the_url_would_be_long(
        api: CollectorAPI, transport: WSGITransport, http: FlaskClient,
        rng: random.Random) -> None:
    reply = http.post("/v1/campaigns", json=campaign_spec("paths", mechanism="rappor"),
                      headers=ADMIN_HEADERS)
    config = reply.get_json()
    _submit(http, config, ["/home", "/cart"] * 20, rng, when=NOW)
    few = ["/home", "/cart"]
    many = [f"/page/{i:04d}" for i in range(MAX_GET_URL // 10)]
    short = api.series("paths", candidates=few)
    assert transport.sent[-1][0] == "GET" and "candidate=%2Fhome" in transport.sent[-1][1]
    long = api.series("paths", candidates=[*few, *many])
    assert transport.sent[-1][0] == "POST"
    assert [s["value"] for s in short["series"]] == few
    assert [s["value"] for s in long["series"]][:2] == few
    with pytest.raises(Exception, match="lists of strings"):
        api.series("paths", candidates="/home")  # type: ignore[arg-type]
