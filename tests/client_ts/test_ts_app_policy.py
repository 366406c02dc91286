"""The TypeScript client's app-side policy against a real collector on 127.0.0.1: the ingest key
(sent with report uploads, never with config fetches; a collector that requires one keeps
refusing the reports of a client without it, which keeps them), the automatic sender (reports
leave with no flush() call), the rolling window across restarts of one state file, and the
worst case and sent log an app shows its user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.client_ts import drive
from helpers.live import LiveCollector
from helpers.support import NOW

KEY = "app-ingest-key-7"
DAY = 86400


@pytest.fixture
def live_config() -> dict[str, Any]:
    return {"INGEST_KEY": KEY}


def _create(live: LiveCollector, spec: dict[str, Any]) -> dict[str, Any]:
    status, config = live.request("POST", "/v1/campaigns", token=live.admin_token, body=spec)
    assert status == 201, config
    return dict(config)


def _theme(live: LiveCollector, **privacy: Any) -> dict[str, Any]:
    return _create(live, {"name": "theme", "mechanism": "krr", "epsilon": 1.0,
                          "domain": ["light", "dark", "hc", "sepia"],
                          "privacy": privacy or {"budget": 10.0, "max_reports": 10}})


def test_the_ingest_key_lets_reports_in_and_a_client_without_it_keeps_them(
        build: Path, live: LiveCollector, tmp_path: Path) -> None:
    config = _theme(live)
    state = str(tmp_path / "state.json")
    steps = [{"op": "report", "campaign": "theme", "value": "dark"},
             {"op": "report", "campaign": "theme", "value": "light"},
             {"op": "flush"}]
    # Pinned by digest, so the config is fetched: reading configs needs no key.
    keyless = drive(build, tmp_path / "keyless", {
        "url": live.url, "state": state, "now": NOW, "client": {
            "campaigns": {"theme": config["digest"]}, "sendDelay": 0},
        "steps": [{"op": "prepare"}, *steps]})
    assert keyless["results"][0] == {"theme": True}
    assert keyless["results"][1:3] == ["queued", "queued"]
    assert keyless["results"][3]["pending"] == 2  # refused with 401: kept, not dropped
    assert keyless["results"][3]["rejected"] == 0
    assert any("401" in line for line in keyless["log"])
    keyed = drive(build, tmp_path / "keyed", {
        "url": live.url, "state": state, "now": NOW + 3600, "client": {
            "campaigns": {"theme": config["digest"]}, "sendDelay": 0, "ingestKey": KEY},
        "steps": [{"op": "flush"}]})
    assert keyed["results"][0] == {"accepted": 2, "duplicate": 0, "rejected": 0, "pending": 0}


def test_reports_leave_by_themselves_with_no_flush_call(
        build: Path, live: LiveCollector, tmp_path: Path) -> None:
    config = _theme(live)
    out = drive(build, tmp_path / "auto", {
        "url": live.url, "state": str(tmp_path / "state.json"), "now": NOW,
        "client": {"campaigns": {"theme": config}, "sendDelay": 0, "ingestKey": KEY,
                   "autoSend": True},
        "steps": [{"op": "report", "campaign": "theme", "value": "dark"},
                  {"op": "untilSent", "ms": 10_000},
                  {"op": "sentLog"}]})
    assert out["results"][:2] == ["queued", 0]
    sent = out["results"][2]
    assert [r["status"] for r in sent["reports"]] == ["accepted"]
    assert "ε spent: 1 of 8 (7 left)" in sent["text"]
    assert sent["html"].startswith('<section class="chorus-sent-log">')


def test_a_rolling_window_holds_across_restarts_against_a_live_collector(
        build: Path, live: LiveCollector, tmp_path: Path) -> None:
    config = _theme(live, unit="day", budget=1.0, max_reports=1)
    report = {"op": "report", "campaign": "theme", "value": "dark"}
    day = [report, {"op": "restart"}, {"op": "advance", "seconds": DAY}]
    out = drive(build, tmp_path / "window", {
        # Six days that end at the collector's (fixed) clock: no report from its future.
        "url": live.url, "state": str(tmp_path / "state.json"), "now": NOW - 6 * DAY + 600,
        "client": {"campaigns": {"theme": config}, "sendDelay": 0, "ingestKey": KEY,
                   "caps": {"lifetimeBudget": None}, "rollingWindow": {"budget": 2, "days": 3},
                   "strict": True},
        "steps": [*day * 6, {"op": "sentLog"}, {"op": "worstCase"}]})
    outcomes = [r for r in out["results"][:18:3]]
    assert outcomes == ["queued", "queued", "error: BudgetExceededError: window-budget"] * 2
    # Each restart's close sent what was due (sendDelay 0): the collector took all four.
    assert [r["status"] for r in out["results"][18]["reports"]] == ["accepted"] * 4
    bound = out["results"][19]
    assert bound["lifetime"] is None  # JSON's null for ∞: no lifetime budget
    assert "at most 2 in any 3 UTC days" in bound["words"]
    assert "nothing caps the total" in bound["words"]
