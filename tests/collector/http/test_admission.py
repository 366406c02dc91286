"""The admission of queries (issue 33 #3), in the app: how many a worker admits, that the one
past the cap is refused at once, and that every admitted query gives its thread back whatever
its answer. The behaviour under load, against the real server, is in
tests/e2e/test_query_admission.py."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from chorus_collector.http.admission import QueryAdmission, query_threads
from chorus_collector.settings import SettingsError, resolve_settings
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, campaign_spec, make_report


def test_a_worker_admits_half_its_threads_unless_told() -> None:
    assert [query_threads(threads, 0) for threads in (1, 2, 3, 8, 16)] == [1, 1, 1, 4, 8]
    assert query_threads(8, 6) == 6
    assert resolve_settings({"QUERY_THREADS": 3})["QUERY_THREADS"] == 3
    with pytest.raises(SettingsError, match="QUERY_THREADS"):
        resolve_settings({"QUERY_THREADS": -1})


def _seeded(make_app: Callable[..., Flask], **settings: Any) -> Flask:
    app = make_app(**settings)
    http = app.test_client()
    http.post("/v1/campaigns", json=campaign_spec("q"), headers=ADMIN_HEADERS)
    config = http.get("/v1/campaigns/q").get_json()
    rng = random.Random(3)
    http.post("/v1/reports", json={"reports": [make_report(config, "a", rng)
                                               for _ in range(5)]})
    return app


def test_the_query_past_the_cap_is_refused_at_once_and_ingest_goes_on(
        make_app: Callable[..., Flask]) -> None:
    # QUERY_WAIT is an hour: a refusal that waited for a slot would not come back.
    app = _seeded(make_app, THREADS=4, QUERY_WAIT=3600)
    admission: QueryAdmission = app.extensions["chorus.queries"]
    assert admission.threads == 2
    http = app.test_client()
    for _ in range(2):  # two queries are running, waiting or sending in this worker
        assert admission.admitted.acquire(blocking=False)
    try:
        for path in ("/v1/campaigns/q/estimates", "/v1/campaigns/q/series",
                     "/v1/campaigns/q/estimates?format=csv", "/v1/campaigns/q/compare"):
            busy = http.get(path, headers=ANALYST_HEADERS)
            assert busy.status_code == 503, path
            assert busy.headers["Retry-After"] == "5"
            assert busy.get_json()["type"].endswith("/query-busy")
            assert "2 estimate queries" in busy.get_json()["detail"]
        assert http.get("/healthz").status_code == 200
        config = http.get("/v1/campaigns/q").get_json()
        reply = http.post("/v1/reports", json=make_report(config, "b", random.Random(4)))
        assert reply.status_code == 201
    finally:
        for _ in range(2):
            admission.admitted.release()
    assert http.get("/v1/campaigns/q/estimates", headers=ANALYST_HEADERS).get_json()["n"] == 6


def test_every_admitted_query_gives_its_thread_back(make_app: Callable[..., Flask]) -> None:
    """Answered, refused for want of a slot, or refused by its own estimator: after each the
    worker admits as many queries as before (none leaks its thread)."""
    app = _seeded(make_app, THREADS=2, QUERY_WAIT=0)
    admission: QueryAdmission = app.extensions["chorus.queries"]
    http = app.test_client()
    assert http.get("/v1/campaigns/q/estimates", headers=ANALYST_HEADERS).status_code == 200
    assert http.get("/v1/campaigns/q/estimates?start=1&end=2",
                    headers=ANALYST_HEADERS).status_code == 400  # misaligned window
    assert admission.slots.acquire(blocking=False)  # the one slot is taken
    try:
        busy = http.get("/v1/campaigns/q/estimates", headers=ANALYST_HEADERS)
        assert busy.status_code == 503 and "none finished within 0 s" in busy.get_json()["detail"]
    finally:
        admission.slots.release()
    assert admission.admitted.acquire(blocking=False)  # the one query thread is free
    admission.admitted.release()
