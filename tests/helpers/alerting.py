"""The alert scenario the alert and dashboard tests share: a k-RR campaign over a, b, c, d,
an hourly rule whose webhook is a receiver on 127.0.0.1, and reports sent through the API."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from helpers.receiver import Receiver
from helpers.support import ADMIN_HEADERS, NOW, campaign_spec, make_report

HOUR = 3600
T0 = int(NOW)
PUBLIC = "https://chorus.example.com"
SECRET = "a-shared-secret-of-some-length"
BEFORE = {"a": 200, "b": 600, "c": 600, "d": 600}  # 2,000 reports: a at 10%
AFTER = {"a": 600, "b": 600, "c": 600, "d": 200}  # a at 30%, d at 10%


def alert_app(make_app: Callable[..., Flask], receiver: Receiver, **rule: Any
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


def send_reports(http: FlaskClient, counts: dict[str, int], bucket: int, seed: int) -> None:
    config = http.get("/v1/campaigns/changes").get_json()
    rng = random.Random(seed)
    reports = [make_report(config, value, rng, now=bucket + 60)
               for value, count in counts.items() for _ in range(count)]
    reply = http.post("/v1/campaigns/changes/reports", json={"reports": reports})
    assert reply.status_code == 200 and reply.get_json()["accepted"] == len(reports)


def fold(app: Flask) -> int:
    folded: int = app.extensions["chorus.folder"].run_once()
    return folded
