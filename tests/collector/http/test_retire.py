"""Retiring a campaign (issue 13 #11): no new reports, estimates stay readable, the name stays
taken, and every collector sharing the database refuses its reports at once."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from flask import Flask

from chorus_collector import create_app
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    FakeClock,
    campaign_spec,
    make_report,
)


def test_a_retired_campaign_takes_no_reports_and_keeps_its_estimates(
        make_app: Callable[..., Flask]) -> None:
    http = make_app().test_client()
    spec = {**campaign_spec("browser"), "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(9)
    before = [make_report(config, "a", rng) for _ in range(5)]
    assert http.post("/v1/reports", json={"reports": before}).get_json()["accepted"] == 5
    assert http.post("/v1/campaigns/browser/retire").status_code == 401  # admin only
    retired = http.post("/v1/campaigns/browser/retire", headers=ADMIN_HEADERS)
    assert retired.status_code == 200
    retired_at = retired.get_json()["retired_at"]
    assert retired.get_json()["digest"] == config["digest"]
    again = http.post("/v1/campaigns/browser/retire", headers=ADMIN_HEADERS).get_json()
    assert again["retired_at"] == retired_at  # idempotent: the first time stays

    single = http.post("/v1/reports", json=make_report(config, "b", rng))
    assert single.status_code == 410
    assert single.get_json()["type"].endswith("/campaign-retired")
    batch = http.post("/v1/campaigns/browser/reports",
                      json={"reports": [make_report(config, "b", rng) for _ in range(3)]})
    assert batch.get_json()["rejected"] == 3
    assert {r["error"] for r in batch.get_json()["results"]} == {"campaign-retired"}
    replay = http.post("/v1/reports", json=before[0])  # nothing at all is taken
    assert replay.get_json()["type"].endswith("/campaign-retired")

    estimate = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS)
    assert estimate.status_code == 200 and estimate.get_json()["n"] == 5
    public = http.get("/v1/campaigns/browser")  # clients stop fetching it
    assert public.status_code == 410 and public.get_json()["retired_at"] == retired_at
    listed = http.get("/v1/campaigns", headers=ADMIN_HEADERS).get_json()["campaigns"]
    assert [(c["name"], c["retired_at"]) for c in listed] == [("browser", retired_at)]
    # The name stays taken: another config is refused, the same one is not revived.
    other = http.post("/v1/campaigns", json={**spec, "epsilon": 0.5}, headers=ADMIN_HEADERS)
    assert other.status_code == 409
    same = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert same.status_code == 200
    assert http.post("/v1/reports", json=make_report(config, "b", rng)).status_code == 410
    assert http.post("/v1/campaigns/nope/retire", headers=ADMIN_HEADERS).status_code == 404


def test_every_collector_refuses_at_once(database: str, clock: FakeClock) -> None:
    replicas = [create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN,
                            "ANALYST_TOKEN": ANALYST}, clock=clock) for _ in range(2)]
    first, second = (replica.test_client() for replica in replicas)
    config: dict[str, Any] = first.post("/v1/campaigns", json=campaign_spec("c"),
                                        headers=ADMIN_HEADERS).get_json()
    rng = random.Random(10)
    assert second.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 201
    first.post("/v1/campaigns/c/retire", headers=ADMIN_HEADERS)
    assert first.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 410
    # The other collector had just read the campaign as active: it refuses at once too.
    assert second.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 410
    listed = second.get("/v1/campaigns", headers=ADMIN_HEADERS).get_json()["campaigns"]
    assert listed[0]["retired_at"] is not None
