"""``chorus estimates`` for analysts: ISO 8601 times and durations (``cli/timespec.py``),
windows aligned to the campaign's time precision, a table that never cuts a value, and CSV
with the window, n and ε on every row. The CLI runs against an in-process collector."""

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
from chorus_collector.cli import campaigns as campaigns_cli
from chorus_collector.cli import main as cli
from chorus_collector.cli import timespec
from chorus_collector.cli.timespec import Window, parse_duration, parse_instant
from chorus_collector.results.tables import MAX_VALUE_WIDTH
from helpers.support import ADMIN_HEADERS, ANALYST, NOW, FakeClock, campaign_spec, make_report

Chorus = Callable[..., Result]
HOUR = 3600
START = int(NOW)  # 2026-01-01T00:00:00Z
PREFIX = "https://shop.example.com/catalog/"  # 33 characters shared by the two long values
LONG_VALUES = [PREFIX + "garden/tools/rakes?sort=price",  # fits the column (62 > 60: wraps)
               PREFIX + "garden/tools/rakes?sort=price&page=2&utm_source=newsletter-2026-11"]


@pytest.fixture
def chorus(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Chorus:
    """``chorus ARGS`` against the in-process collector, with the analyst's token."""
    monkeypatch.setattr(campaigns_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=WSGITransport(app)))

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env={"CHORUS_URL": "http://collector.test",
                                                        "CHORUS_TOKEN": ANALYST})

    return invoke


def _create(http: FlaskClient, spec: dict[str, Any]) -> dict[str, Any]:
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config: dict[str, Any] = reply.get_json()
    return config


def _submit(http: FlaskClient, config: dict[str, Any], values: list[Any], rng: random.Random,
            when: float) -> None:
    reports = [make_report(config, value, rng, now=when) for value in values]
    body = http.post("/v1/reports", json={"reports": reports}).get_json()
    assert body["accepted"] == len(values), body


@pytest.fixture
def two_hours(http: FlaskClient, clock: FakeClock, rng: random.Random) -> dict[str, Any]:
    """A k-RR campaign (hourly buckets) with 30 reports in its first hour and 20 in its
    second; the clock two hours on."""
    config = _create(http, campaign_spec("survey"))
    clock.now = NOW + 2 * HOUR
    _submit(http, config, ["a", "b", "c"] * 10, rng, when=NOW)
    _submit(http, config, ["a", "d"] * 10, rng, when=NOW + HOUR)
    return config


# -- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("2026-01-01", START),
    ("2026-01-01T00:00", START),
    ("2026-01-01T01:30", START + 5400),
    ("2026-01-01T01:30:15", START + 5415),
    ("2026-01-01T00:00:00Z", START),
    ("2026-01-01T00:00:00.750Z", START),  # a fraction of a second is dropped
    ("2026-01-01T02:00+02:00", START),
    ("2025-12-31T19:00:00-05:00", START),
    ("2026-01-01 01:00", START + HOUR),
    (str(START), START),
    (f" {START} ", START),
])
def test_instants_in_every_accepted_form(text: str, seconds: int) -> None:
    assert parse_instant(text) == seconds


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "2026-01-01T25:00", "", "-5",
                                  "1.5e9", "01/11/2026"])
def test_an_unreadable_instant_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"ISO 8601 date .*Unix seconds"):
        parse_instant(text)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("90m", 5400), ("24h", 86_400), ("7d", 604_800), ("2w", 1_209_600),
    ("1d12h", 129_600), ("1.5h", 5400), ("7D", 604_800),
    ("PT30S", 30), ("PT90M", 5400), ("PT12H", 43_200), ("P7D", 604_800), ("P2W", 1_209_600),
    ("P1DT12H", 129_600), ("PT1,5H", 5400), ("p1d", 86_400),
])
def test_durations_in_every_accepted_form(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "message"), [
    ("7", "not a duration"), ("d", "not a duration"), ("1h1d", "not a duration"),
    ("P", "not a duration"), ("PT", "not a duration"), ("P1DT", "not a duration"),
    ("-1d", "not a duration"), ("week", "not a duration"),
    ("P1M", "no fixed length"), ("P1Y", "no fixed length"), ("P1Y2M3D", "no fixed length"),
    ("0d", "at least a second"), ("PT0.5S", "at least a second"),
])
def test_an_unreadable_duration_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


def test_a_window_aligns_its_start_down_and_its_end_up() -> None:
    assert Window(START + 1, START + HOUR - 1).aligned(HOUR) == Window(START, START + HOUR)
    assert Window(START, START + HOUR).aligned(HOUR) == Window(START, START + HOUR)
    assert Window(START + 1, None).aligned(HOUR) == Window(START, None)
    assert Window(None, START + 1).aligned(86_400) == Window(None, START + 86_400)
    assert Window().aligned(HOUR) == Window()


# -- windows on the command line --------------------------------------------------------------


def test_iso_times_are_aligned_to_the_campaign_and_the_window_said(
        chorus: Chorus, two_hours: dict[str, Any]) -> None:
    result = chorus("estimates", "survey", "--start", "2026-01-01T00:30Z",
                    "--end", "2026-01-01T00:59", "--format", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["window"] == {"start": START, "end": START + HOUR}
    assert body["n"] == 30
    assert result.stderr.strip() == (
        "window [2026-01-01T00:00Z, 2026-01-01T01:00Z): aligned to the campaign's time "
        "precision (1 h) from [2026-01-01T00:30Z, 2026-01-01T00:59Z)")
    for start in ("2026-01-01T02:00+01:00", str(START + HOUR)):  # aligned already: no note
        second = chorus("estimates", "survey", "--start", start, "--format", "json")
        assert second.exit_code == 0, second.output
        assert json.loads(second.stdout)["window"] == {"start": START + HOUR, "end": None}
        assert json.loads(second.stdout)["n"] == 20
        assert second.stderr == ""


def test_last_is_the_window_up_to_now_aligned(chorus: Chorus, two_hours: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timespec, "time", SimpleNamespace(time=lambda: NOW + 2 * HOUR + 600.5))
    for last in ("1h", "PT1H", "60m"):  # [01:10, 02:10) → [01:00, 03:00)
        result = chorus("estimates", "survey", "--last", last, "--format", "json")
        assert result.exit_code == 0, result.output
        body = json.loads(result.stdout)
        assert body["window"] == {"start": START + HOUR, "end": START + 3 * HOUR}
        assert body["n"] == 20
        assert "aligned to the campaign's time precision" in result.stderr
    whole = json.loads(chorus("estimates", "survey", "--last", "P1D", "--format",
                              "json").stdout)
    assert whole["window"] == {"start": START - 22 * HOUR, "end": START + 3 * HOUR}
    assert whole["n"] == 50
    ages = json.loads(chorus("estimates", "survey", "--last", "3000w", "--format",
                             "json").stdout)
    assert ages["window"] == {"start": 0, "end": START + 3 * HOUR}


@pytest.mark.parametrize(("args", "message"), [
    (["--last", "7d", "--start", "2026-01-01"], "--last cannot be combined with --start"),
    (["--last", "7d", "--end", "2026-01-01"], "--last cannot be combined with --start"),
    (["--start", "2026-01-01T01:00Z", "--end", "2026-01-01"],
     "--end (2026-01-01T00:00Z) must be after --start (2026-01-01T01:00Z)"),
    (["--start", "yesterday"], "'yesterday' is not a time: use an ISO 8601 date"),
    (["--end", "2026-02-30"], "is not a time"),
    (["--last", "a week"], "'a week' is not a duration: use a number and a unit"),
    (["--last", "P1M"], "years and months have no fixed length"),
])
def test_bad_window_options_are_refused_in_one_line(chorus: Chorus, two_hours: dict[str, Any],
                                                    args: list[str], message: str) -> None:
    result = chorus("estimates", "survey", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(error_lines) == 1, result.stderr


def test_the_collector_s_refusal_is_one_line(chorus: Chorus, two_hours: dict[str, Any]) -> None:
    result = chorus("estimates", "nothing-here", "--start", "2026-01-01")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "404" in result.stderr


# -- the table -----------------------------------------------------------------------------------


def test_the_table_shows_long_values_sharing_a_prefix_in_full(
        chorus: Chorus, http: FlaskClient, clock: FakeClock, rng: random.Random) -> None:
    short = "https://shop.example.com/catalog/garden"  # a prefix of both long values
    config = _create(http, campaign_spec("pages", domain=[*LONG_VALUES, short]))
    clock.now = NOW + HOUR
    _submit(http, config, [*LONG_VALUES, short] * 20, rng, when=NOW)
    result = chorus("estimates", "pages", "--end", "2026-01-01T01:00Z")
    assert result.exit_code == 0, result.output
    header, columns, *lines = result.stdout.splitlines()
    assert header == ("pages: krr, ε = 1.5, n = 60; window all data before 2026-01-01T01:00Z; "
                      "variance model iid-sampling; post-processing none (unbiased)")
    assert columns.split() == ["value", "estimate", "std", "err", "95%", "interval"]
    shown = _values_in_table(lines)
    assert shown == [*LONG_VALUES, short]
    assert "continues the value above it" in lines[-1]


def _values_in_table(lines: list[str]) -> list[str]:
    """Each row's value: its first line's column, then its continuation lines (``↳``)."""
    values: list[str] = []
    for line in lines:
        if line.startswith("↳ "):
            values[-1] += line[2:]
        elif line.startswith("  ") and not line.startswith("  ("):
            values.append(line[2:2 + MAX_VALUE_WIDTH].rstrip())
    return values


def test_the_table_header_gives_the_window_and_values_that_could_be_mistaken_are_quoted(
        chorus: Chorus, http: FlaskClient, clock: FakeClock, rng: random.Random) -> None:
    config = _create(http, campaign_spec("spaces", domain=["a", "a ", "\"a\"", "b\tc"]))
    clock.now = NOW + 2 * HOUR
    _submit(http, config, ["a", "a ", "\"a\"", "b\tc"] * 10, rng, when=NOW + HOUR)
    result = chorus("estimates", "spaces", "--start", "2026-01-01T01:00Z", "--end",
                    "2026-01-01T02:00Z", "--postprocessing", "norm-sub")
    assert result.exit_code == 0, result.output
    header, _, *rows = result.stdout.splitlines()
    assert "; window [2026-01-01T01:00Z, 2026-01-01T02:00Z); " in header
    assert "; post-processing norm-sub: " in header and header.endswith("(biased)")
    # The answer says what norm-sub may harm (one common value's frequency), after the rows.
    assert rows[-1].strip().startswith("warning: norm-sub: lowers the error summed over all values")
    assert [row.split("  ")[1] for row in rows[:-1]] == ["a", '"a "', '"\\"a\\""', '"b\\tc"']


# -- CSV -------------------------------------------------------------------------------------------


def _vector_spec() -> dict[str, Any]:
    domain = {"kind": "vector", "attributes": [{"name": "cpu", "lo": 0, "hi": 1},
                                               {"name": "memory", "lo": 0, "hi": 100}]}
    spec = campaign_spec("resources", mechanism="duchi", domain=domain)
    spec["mechanism"] = "duchi_md"  # campaign_spec knows the scalar Duchi only
    return spec


@pytest.mark.parametrize(("spec", "values", "first_columns"), [
    (campaign_spec("survey"), ["a", "b"] * 20,
     ["value", "count", "count_std_error", "count_ci_low", "count_ci_high", "frequency",
      "frequency_std_error", "frequency_ci_low", "frequency_ci_high", "detected"]),
    (campaign_spec("latency", mechanism="duchi"), [30.0, 70.0] * 20,
     ["mean", "std_error", "ci_low", "ci_high", "n"]),
    (_vector_spec(), [{"cpu": 0.5, "memory": 40.0}] * 40,
     ["attribute", "mean", "std_error", "ci_low", "ci_high", "n"]),
], ids=["frequency", "mean", "vector"])
def test_csv_rows_carry_the_window_n_and_epsilon_after_the_earlier_columns(
        chorus: Chorus, http: FlaskClient, clock: FakeClock, rng: random.Random,
        spec: dict[str, Any], values: list[Any], first_columns: list[str]) -> None:
    config = _create(http, spec)
    clock.now = NOW + HOUR
    _submit(http, config, values, rng, when=NOW)
    for args, window in ((["--start", "2026-01-01"], [str(START), ""]),
                         (["--end", "2026-01-01T01:00Z"], ["", str(START + HOUR)]),
                         ([], ["", ""])):
        result = chorus("estimates", spec["name"], *args, "--format", "csv")
        assert result.exit_code == 0, result.output
        header, *rows = list(csv.reader(io.StringIO(result.stdout)))
        assert header[:len(first_columns)] == first_columns
        assert len(set(header)) == len(header)
        assert set(header) == {*first_columns, "window_start", "window_end", "n", "epsilon"}
        assert header[-3:] == (["window_end", "n", "epsilon"] if "detected" in header
                               else ["window_start", "window_end", "epsilon"])
        assert rows
        for row in rows:
            cells = dict(zip(header, row, strict=True))
            assert [cells["window_start"], cells["window_end"]] == window
            assert int(cells["n"]) == len(values)
            assert float(cells["epsilon"]) == spec["epsilon"]
            assert cells.get("detected", "") == ""  # not a RAPPOR-like campaign: empty


def test_csv_booleans_are_true_and_false(chorus: Chorus, http: FlaskClient, clock: FakeClock,
                                         rng: random.Random) -> None:
    config = _create(http, campaign_spec("urls", mechanism="rappor"))
    clock.now = NOW + HOUR
    _submit(http, config, ["x"] * 300 + ["y"] * 100, rng, when=NOW)
    result = chorus("estimates", "urls", "--candidate", "x", "--candidate", "y",
                    "--candidate", "z", "--format", "csv")
    assert result.exit_code == 0, result.output
    table = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["value"] for row in table] == ["x", "y", "z"]
    assert {row["detected"] for row in table} <= {"true", "false"}
    assert table[0]["detected"] == "true"  # 75% of the reports: far above the threshold
    assert "True" not in result.stdout and "False" not in result.stdout
