"""``chorus alert create|list|show|firings|delete`` over the in-process collector: the rule
made is the API's, the secret comes from an environment variable, and refusals are one
line that says why."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from flask import Flask

from chorus_client import CollectorAPI, WSGITransport
from chorus_collector.cli import alerts as alerts_cli
from chorus_collector.cli import main as cli
from helpers.support import ADMIN, ANALYST

Chorus = Callable[..., Result]


@pytest.fixture
def chorus(app: Flask, monkeypatch: pytest.MonkeyPatch) -> Chorus:
    monkeypatch.setattr(alerts_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=WSGITransport(app)))

    def invoke(*args: str, token: str = ADMIN, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(cli, list(args), env={
            "CHORUS_URL": "http://collector.test", "CHORUS_TOKEN": token, **(env or {})})

    return invoke


def test_create_list_show_firings_and_delete(chorus: Chorus,
                                             create: Callable[..., dict[str, Any]]) -> None:
    create("survey")
    made = chorus("alert", "create", "survey-daily", "--campaign", "survey", "--window", "1d",
                  "--webhook", "https://hooks.example.com/T0/B0/secretpath", "--value", "a",
                  "--value", "b", "--alpha", "0.01", "--min-change", "0.02", "--resolved",
                  "--secret-env", "HOOK_SECRET", env={"HOOK_SECRET": "x" * 24})
    assert made.exit_code == 0, made.output
    assert made.output == (
        "created alert 'survey-daily' on survey: the last 86400 s against the 86400 s before, "
        "a, b, benjamini-hochberg at alpha 0.01, |change| >= 0.02 → "
        "https://hooks.example.com/… (signed)\n")
    listed = chorus("alert", "list", "--campaign", "survey", token=ANALYST)
    assert listed.exit_code == 0 and listed.output == made.output.removeprefix("created ")
    shown = chorus("alert", "show", "survey-daily", token=ANALYST)
    rule = json.loads(shown.output)
    assert rule["significant"] == [] and rule["values"] == ["a", "b"] and rule["resolved"]
    assert "secretpath" not in shown.output and "x" * 24 not in shown.output
    firings = chorus("alert", "firings", "survey-daily", token=ANALYST)
    assert firings.output == "survey-daily: no notifications yet\n"
    refused = chorus("alert", "delete", "survey-daily", token=ANALYST)
    assert refused.exit_code == 1 and "admin token" in refused.output
    assert chorus("alert", "delete", "survey-daily").output == "deleted alert 'survey-daily'\n"
    assert chorus("alert", "list").output.startswith("no alert rules yet")


def test_a_refused_rule_says_why_in_one_line(chorus: Chorus,
                                             create: Callable[..., dict[str, Any]]) -> None:
    create("survey")
    result = chorus("alert", "create", "r", "--campaign", "survey", "--window", "90m",
                    "--webhook", "https://hooks.example.com/x")
    assert result.exit_code == 1
    assert "whole number of the campaign's time buckets" in result.output
    unset = chorus("alert", "create", "r", "--campaign", "survey", "--window", "1h",
                   "--webhook", "https://hooks.example.com/x", "--secret-env", "NOPE")
    assert unset.exit_code == 1 and "NOPE is not set" in unset.output
