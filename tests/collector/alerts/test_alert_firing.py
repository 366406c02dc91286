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
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.alerts import SIGNATURE_HEADER
from helpers.receiver import Receiver
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    campaign_spec,
    make_report,
    query,
)

HOUR = 3600
T0 = int(NOW)
PUBLIC = "https://chorus.example.com"
SECRET = "a-shared-secret-of-some-length"
BEFORE = {"a": 200, "b": 600, "c": 600, "d": 600}  # 2,000 reports: a at 10%
AFTER = {"a": 600, "b": 600, "c": 600, "d": 200}  # a at 30%, d at 10%


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


def _setup(make_app: Callable[..., Flask], receiver: Receiver, **rule: Any
           ) -> tuple[Flask, FlaskClient, dict[str, Any]]:
    app = make_app(PUBLIC_URL=PUBLIC, FOLD_INTERVAL=0)
    http = app.test_client()
    reply = http.post("/v1/campaigns", headers=ADMIN_HEADERS, json=campaign_spec(
        "changes", mechanism="krr", epsilon=2.0, min_batch_size=100))
    assert reply.status_code == 201
    body = {"name": "changes-hourly", "campaign": "changes", "window": "1h",
            "webhook": f"{receiver.url}/hooks/chorus?token=abc", "secret": SECRET, **rule}
    reply = http.post("/v1/alerts", headers=ADMIN_HEADERS, json=body)
    assert reply.status_code == 201, reply.get_json()
    return app, http, reply.get_json()


def _send(http: FlaskClient, counts: dict[str, int], bucket: int, seed: int) -> None:
    config = http.get("/v1/campaigns/changes").get_json()
    rng = random.Random(seed)
    reports = [make_report(config, value, rng, now=bucket + 60)
               for value, count in counts.items() for _ in range(count)]
    reply = http.post("/v1/campaigns/changes/reports", json={"reports": reports})
    assert reply.status_code == 200 and reply.get_json()["accepted"] == len(reports)


def _fold(app: Flask) -> int:
    folded: int = app.extensions["chorus.folder"].run_once()
    return folded


def _verify(received: Any) -> None:
    """The Chorus-Signature header is HMAC-SHA256 of "<t>." + body under the secret."""
    fields = dict(part.split("=", 1) for part in received.headers[SIGNATURE_HEADER].split(","))
    expected = hmac.new(SECRET.encode(), f"{fields['t']}.".encode() + received.body,
                        hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)


def test_a_planted_change_fires_once_with_the_comparisons_figures_and_a_link(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock) -> None:
    app, http, rule = _setup(make_app, receiver, resolved=True)
    assert "token" not in rule["webhook"] and "secret" not in rule and rule["signed"]
    _send(http, BEFORE, T0 - 2 * HOUR, seed=1)
    _send(http, AFTER, T0 - HOUR, seed=2)
    clock.now = NOW + 30  # 30 s into the bucket after the current window
    assert _fold(app) == 4000
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
    assert _fold(app) == 0
    _send(http, AFTER, T0 - HOUR, seed=3)
    assert _fold(app) == 2000  # late reports of the current window: the same end
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
    _send(http, AFTER, T0, seed=4)
    assert _fold(app) == 2000
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
    app, http, _ = _setup(make_app, receiver, resolved=True)
    _send(http, AFTER, T0 - 2 * HOUR, seed=5)
    _send(http, AFTER, T0 - HOUR, seed=6)
    clock.now = NOW + 30
    assert _fold(app) == 4000
    assert receiver.received == []
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["last_end"] == T0 and shown["last_error"] is None
    assert shown["significant"] == []


def test_too_few_reports_is_recorded_as_the_rules_last_error(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock) -> None:
    app, http, _ = _setup(make_app, receiver)
    _send(http, {"a": 50}, T0 - HOUR, seed=7)  # under min_batch_size, no baseline at all
    clock.now = NOW + 30
    assert _fold(app) == 50
    shown = http.get("/v1/alerts/changes-hourly", headers=ANALYST_HEADERS).get_json()
    assert shown["last_end"] == T0 and shown["last_error"].startswith("invalid-batch-size")
    assert receiver.received == []


def test_two_replicas_folding_at_once_send_one_notification(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock,
        database: str) -> None:
    app, http, _ = _setup(make_app, receiver)
    replica = make_app(PUBLIC_URL=PUBLIC, FOLD_INTERVAL=0)
    _send(http, BEFORE, T0 - 2 * HOUR, seed=8)
    _send(http, AFTER, T0 - HOUR, seed=9)
    clock.now = NOW + 30
    start = threading.Barrier(2)
    folded: list[int] = []

    def run(this: Flask) -> None:
        start.wait()
        folded.append(_fold(this))

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
