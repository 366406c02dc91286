"""Alert rules end to end: reports ingested over HTTP, folded by the app's own folder, the
rule evaluated after the fold and its notification posted to a webhook receiver on 127.0.0.1.

* a planted change (value a from 10% to 30%, d from 30% to 10%, between two hourly windows
  of 2,000 reports each) fires exactly once, signed, with the comparison route's own figures
  for exactly those windows and a dashboard link to them; more folds of the same windows, a
  restarted collector and a second replica send nothing more; when the change is gone, the
  rule says so once ("resolved");
* no change: the rule is evaluated and nothing is sent;
* two replicas folding at once: one evaluation, one notification.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask

from chorus_collector.alerts import SIGNATURE_HEADER
from helpers.alerting import AFTER, BEFORE, HOUR, PUBLIC, SECRET, T0, alert_app, fold, send_reports
from helpers.receiver import Receiver
from helpers.support import (
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    query,
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


def _verify(received: Any) -> None:
    """The Chorus-Signature header is HMAC-SHA256 of "<t>." + body under the secret."""
    fields = dict(part.split("=", 1) for part in received.headers[SIGNATURE_HEADER].split(","))
    expected = hmac.new(SECRET.encode(), f"{fields['t']}.".encode() + received.body,
                        hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)


def test_a_planted_change_fires_once_with_the_comparisons_figures_and_a_link(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock) -> None:
    app, http, rule = alert_app(make_app, receiver, resolved=True)
    assert "token" not in rule["webhook"] and "secret" not in rule and rule["signed"]
    send_reports(http, BEFORE, T0 - 2 * HOUR, seed=1)
    send_reports(http, AFTER, T0 - HOUR, seed=2)
    clock.now = NOW + 30  # 30 s into the bucket after the current window
    assert fold(app) == 4000
    assert len(receiver.received) == 1
    sent = receiver.received[0]
    assert sent.path == "/hooks/chorus?token=abc"
    assert sent.headers["Chorus-Event"] == "triggered"
    _verify(sent)
    payload = sent.json()
    assert sent.headers["Chorus-Idempotency-Key"] == payload["idempotency_key"]
    assert payload["event"] == "triggered" and payload["campaign"] == "changes"
    assert payload["baseline"] == {"start": T0 - 2 * HOUR, "end": T0 - HOUR, "n": 2000}
    assert payload["current"] == {"start": T0 - HOUR, "end": T0, "n": 2000}
    assert payload["correction"] == "benjamini-hochberg" and payload["tested"] == 4
    # The figures are the comparison route's, for exactly these windows.
    compared = http.get("/v1/campaigns/changes/compare", headers=ANALYST_HEADERS,
                        query_string={"baseline_start": T0 - 2 * HOUR,
                                      "baseline_end": T0 - HOUR, "start": T0 - HOUR,
                                      "end": T0}).get_json()
    rows = {row["value"]: row for row in compared["rows"]}
    assert sorted(v["value"] for v in payload["values"]) == ["a", "d"] == \
        sorted(v for v, row in rows.items() if row["significant"])
    for figures in payload["values"]:
        row = rows[figures["value"]]
        for name in ("baseline_estimate", "current_estimate", "difference", "std_error",
                     "ci_low", "ci_high", "p_value", "adjusted_p_value"):
            assert figures[name] == pytest.approx(row[name], rel=1e-12), name
        truth = {"a": 0.2, "d": -0.2}[figures["value"]]
        assert figures["ci_low"] < truth < figures["ci_high"]
        assert figures["adjusted_p_value"] < 1e-6
    assert payload["significant"] == ["a", "d"]
    link = urlsplit(payload["link"])
    assert f"{link.scheme}://{link.netloc}{link.path}" == f"{PUBLIC}/campaigns/changes"
    assert link.fragment == "comparison"
    assert parse_qs(link.query) == {
        "baseline_start": [str(T0 - 2 * HOUR)], "baseline_end": [str(T0 - HOUR)],
        "current_start": [str(T0 - HOUR)], "current_end": [str(T0)],
        "correction": ["benjamini-hochberg"]}
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["significant"] == ["a", "d"] and shown["last_end"] == T0

    # Exactly once: folds of the same windows, a restart and a second replica send nothing.
    assert fold(app) == 0
    send_reports(http, AFTER, T0 - HOUR, seed=3)
    assert fold(app) == 2000  # late reports of the current window: the same end
    restarted = make_app(PUBLIC_URL=PUBLIC, FOLD_INTERVAL=0)
    stored = app.extensions["chorus.storage"].get_campaign("changes")
    assert restarted.extensions["chorus.alerts"].after_fold([stored.id]) == 0
    restarted.extensions["chorus.alerts"].every_round()
    assert len(receiver.received) == 1
    firings = http.get("/v1/alerts/changes-hourly/firings", headers=ANALYST_HEADERS).get_json()
    assert [(f["event"], f["status"], f["attempts"]) for f in firings["firings"]] == \
        [("triggered", "delivered", 1)]

    # An hour on, the next window is like the one before it: the change is over, said once.
    clock.now = NOW + HOUR + 30
    send_reports(http, AFTER, T0, seed=4)
    assert fold(app) == 2000
    assert len(receiver.received) == 2
    resolved = receiver.received[1].json()
    assert resolved["event"] == "resolved" and resolved["significant"] == []
    assert sorted(v["value"] for v in resolved["values"]) == ["a", "d"]
    assert all(v["adjusted_p_value"] >= 0.05 for v in resolved["values"])
    assert resolved["idempotency_key"] != payload["idempotency_key"]
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["significant"] == [] and shown["last_end"] == T0 + HOUR


def test_no_change_is_evaluated_and_sends_nothing(make_app: Callable[..., Flask],
                                                  receiver: Receiver, clock: FakeClock) -> None:
    app, http, _ = alert_app(make_app, receiver, resolved=True)
    send_reports(http, AFTER, T0 - 2 * HOUR, seed=5)
    send_reports(http, AFTER, T0 - HOUR, seed=6)
    clock.now = NOW + 30
    assert fold(app) == 4000
    assert receiver.received == []
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["last_end"] == T0 and shown["last_error"] is None
    assert shown["significant"] == []


def test_too_few_reports_is_recorded_as_the_rules_last_error(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock) -> None:
    app, http, _ = alert_app(make_app, receiver)
    send_reports(http, {"a": 50}, T0 - HOUR, seed=7)  # under min_batch_size, no baseline at all
    clock.now = NOW + 30
    assert fold(app) == 50
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["last_end"] == T0 and shown["last_error"].startswith("invalid-batch-size")
    assert receiver.received == []


def test_two_replicas_folding_at_once_send_one_notification(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock,
        database: str) -> None:
    app, http, _ = alert_app(make_app, receiver)
    replica = make_app(PUBLIC_URL=PUBLIC, FOLD_INTERVAL=0)
    send_reports(http, BEFORE, T0 - 2 * HOUR, seed=8)
    send_reports(http, AFTER, T0 - HOUR, seed=9)
    clock.now = NOW + 30
    start = threading.Barrier(2)
    folded: list[int] = []

    def run(this: Flask) -> None:
        start.wait()
        folded.append(fold(this))

    threads = [threading.Thread(target=run, args=(each,)) for each in (app, replica)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(folded) == 4000
    for each in (app, replica):  # whichever lost a race delivers what is left
        each.extensions["chorus.alerts"].every_round()
    assert len(receiver.received) == 1
    assert query(database, "SELECT count(*) FROM alert_firings") == [(1,)]
