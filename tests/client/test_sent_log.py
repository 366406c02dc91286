"""``Client.sent_log()``: what this device sent, as it left, for the app to show its user;
nothing in it that the collector did not get."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from chorus_client import Client, Response, SentLog, SentReport
from chorus_client.state import FILE_NAME
from chorus_shared import campaign_from_spec
from helpers.support import NOW, FakeClock, ScriptedTransport, Sent, campaign_spec

BASE = "http://collector.test"
FIELDS = {"campaign", "report_id", "time", "payload", "epsilon", "status", "answered_on"}


def answering(refuse: frozenset[int] = frozenset()) -> Any:
    """A collector that accepts every report but those at the given positions."""
    count = [0]

    def answer(call: Sent) -> Response:
        results = []
        for r in json.loads(call.body or b"{}")["reports"]:
            status = "rejected" if count[0] in refuse else "accepted"
            count[0] += 1
            results.append({"report_id": r["report_id"], "status": status,
                            **({"error": "invalid-payload"} if status == "rejected" else {})})
        return Response(200, json.dumps({"results": results}).encode())

    return answer


def make(tmp_path: Path, transport: Any, **kwargs: Any) -> Client:
    configs = {name: campaign_from_spec(campaign_spec(name)).public_config()
               for name in ("browser", "theme")}
    kwargs.setdefault("lifetime_budget", 8.0)
    return Client(BASE, state_dir=tmp_path, campaigns=configs, transport=transport,
                  clock=FakeClock(NOW + 600), send_delay=0.0, rng=random.Random(5),
                  allow_insecure_rng=True, **kwargs)


def sent_reports(transport: ScriptedTransport) -> dict[str, dict[str, Any]]:
    return {r["report_id"]: r for call in transport.sent if call.url.endswith("/v1/reports")
            for r in json.loads(call.body or b"{}")["reports"]}


def test_the_log_is_what_left_and_nothing_more(tmp_path: Path) -> None:
    transport = ScriptedTransport([], fallback=answering(refuse=frozenset({2})))
    client = make(tmp_path, transport, lifetime_budget=12.0)  # 6 for each campaign
    for value in ("a", "b", "c"):
        client.report("browser", value)
    client.report("theme", "d")
    assert client.flush().accepted == 3
    log = client.sent_log()
    assert isinstance(log, SentLog) and len(log.reports) == 4
    on_the_wire = sent_reports(transport)
    for entry in log.reports:
        assert set(entry.as_dict()) == FIELDS
        wire = on_the_wire[entry.report_id]
        # Exactly the report the collector received: its ID, time bucket and payload.
        assert (entry.time, entry.payload) == (wire["time"], wire["payload"])
        assert entry.epsilon == 1.5 and entry.answered_on == "2026-01-01"
    assert [e.campaign for e in log.reports] == ["theme", "browser", "browser", "browser"]
    assert [e.status for e in log.reports] == ["accepted", "refused", "accepted", "accepted"]
    # A refused report's ε stays spent: 4 reports at 1.5.
    assert log.spent == pytest.approx(6.0) and log.remaining == pytest.approx(6.0)
    assert log.waiting == 0
    assert client.sent_log(limit=1).reports == log.reports[:1]
    client.close()


def test_the_log_keeps_only_the_newest_and_none_when_asked(tmp_path: Path) -> None:
    transport = ScriptedTransport([], fallback=answering())
    client = make(tmp_path / "two", transport, sent_log_size=2, lifetime_budget=math.inf)
    for value in "abcd":
        client.report("browser", value)
        client.flush()
    ids = [r["report_id"] for r in sent_reports(transport).values()]
    assert [e.report_id for e in client.sent_log().reports] == ids[:-3:-1]
    client.close()
    none = make(tmp_path / "none", ScriptedTransport([], fallback=answering()),
                sent_log_size=0)
    none.report("browser", "a")
    assert none.flush().accepted == 1
    assert none.sent_log().reports == ()
    none.close()
    with sqlite3.connect(tmp_path / "none" / FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM sent_log").fetchone()[0] == 0
    for wrong in (-1, 1.5, True):
        with pytest.raises(ValueError, match="sent_log_size"):
            make(tmp_path / "bad", transport, sent_log_size=wrong)


def test_a_report_queued_before_the_log_existed_is_logged_without_its_epsilon(
        tmp_path: Path) -> None:
    config = campaign_from_spec(campaign_spec("browser")).public_config()
    report = {"report_id": "ab" * 16, "digest": config["digest"], "time": int(NOW),
              "payload": 2}
    with sqlite3.connect(tmp_path / FILE_NAME) as db:  # a schema 5 file, one report queued
        db.executescript(f"""
            CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, report TEXT NOT NULL,
                created REAL NOT NULL, campaign TEXT NOT NULL DEFAULT '',
                due REAL NOT NULL DEFAULT 0);
            INSERT INTO outbox (report, created, campaign, due)
                VALUES ('{json.dumps(report)}', {NOW}, 'browser', 0);
            PRAGMA user_version = 5;
        """)
    client = make(tmp_path, ScriptedTransport([], fallback=answering()))
    assert client.flush().accepted == 1
    [entry] = client.sent_log().reports
    assert entry.epsilon is None and entry.payload == 2
    assert "ε ?" in client.sent_log().text()
    client.close()


def test_text_and_html_render_every_field_escaped() -> None:
    entry = SentReport(campaign="a&b", report_id="00", time=int(NOW),
                       payload={"bits": "<script>alert(1)</script>"}, epsilon=1.0,
                       status="accepted", answered_on="2026-01-01")
    log = SentLog(reports=(entry,), spent=1.0, lifetime_budget=8.0, waiting=1)
    text = log.text().splitlines()
    assert text[0] == "What this device sent, newest first."
    assert text[2] == "ε spent: 1 of 8 (7 left); 1 report waits to be sent"
    assert text[3] == ('2026-01-01  a&b  ε 1  accepted  bucket 2026-01-01 00:00 UTC  '
                       'payload {"bits":"<script>alert(1)</script>"}')
    page = log.html()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page
    assert page.startswith('<section class="chorus-sent-log">') and "<caption>" in page
    empty = SentLog(reports=(), spent=0.0, lifetime_budget=math.inf, waiting=0)
    assert empty.text().endswith("ε spent: 0 (no lifetime budget set)\nNothing sent yet.")
    assert "<p>Nothing sent yet.</p>" in empty.html()
    assert json.loads(json.dumps(log.as_dict()))["reports"][0]["campaign"] == "a&b"
