"""A database that goes away: every request that needs it answers ``503 storage-unavailable``
with ``Retry-After`` (never a 500), ``/healthz`` says so, the outage is logged once when it
starts and once when it ends, and nothing acknowledged is lost or counted twice.

PostgreSQL is stopped for real (``pg_ctl -m immediate``, a server of the test's own, so the
session's server stays up) and started again; SQLite is locked by another connection past the
busy timeout ("database is locked").
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector import create_app
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    FakeClock,
    campaign_spec,
    make_report,
    query,
)


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A PostgreSQL server this test may stop and start."""
    from helpers.postgres import running_postgres

    with running_postgres() as server:
        yield server


def _app(database: str, clock: FakeClock) -> Flask:
    return create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                      clock=clock)


def _outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str], list[str]]:
    """(outage started, outage ended, tracebacks) among the records."""
    started = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("storage unavailable")]
    ended = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("storage available again")]
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    return started, ended, tracebacks


def _assert_unavailable(reply: Any) -> None:
    assert reply.status_code == 503, reply.get_data(as_text=True)
    assert reply.mimetype == "application/problem+json"
    assert reply.get_json()["type"].endswith("/storage-unavailable")
    assert int(reply.headers["Retry-After"]) > 0


@pytest.mark.postgresql_only
def test_postgresql_stopped_answers_503_and_logs_the_outage_once(
        own_postgres: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    url = own_postgres.new_schema()
    clock = FakeClock()
    http = _app(url, clock).test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("out"),
                       headers=ADMIN_HEADERS).get_json()
    rng = random.Random(1)
    assert http.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 201

    own_postgres.halt()
    batch = {"reports": [make_report(config, "b", rng) for _ in range(3)]}
    for _ in range(5):  # every route that needs the database, several times
        _assert_unavailable(http.post("/v1/reports", json=make_report(config, "a", rng)))
        _assert_unavailable(http.post("/v1/campaigns/out/reports", json=batch))
        _assert_unavailable(http.get("/v1/campaigns/out/estimates", headers=ANALYST_HEADERS))
        _assert_unavailable(http.get("/v1/campaigns", headers=ADMIN_HEADERS))
        _assert_unavailable(http.get("/healthz"))
    started, ended, tracebacks = _outage_lines(caplog)
    assert len(started) == 1 and ended == [] and tracebacks == []

    own_postgres.resume()
    assert http.get("/healthz").status_code == 200
    assert http.post("/v1/reports", json=batch).get_json()["accepted"] == 3
    assert http.post("/v1/reports", json=make_report(config, "c", rng)).status_code == 201
    started, ended, tracebacks = _outage_lines(caplog)
    assert len(started) == 1 and len(ended) == 1 and tracebacks == []
    assert query(url, "SELECT count(*) FROM reports") == [(5,)]


@pytest.mark.postgresql_only
def test_postgresql_stopped_under_load_loses_no_acknowledged_report_and_counts_none_twice(
        own_postgres: Any) -> None:
    url = own_postgres.new_schema()
    app = _app(url, FakeClock())
    config = app.test_client().post("/v1/campaigns", json=campaign_spec("load"),
                                    headers=ADMIN_HEADERS).get_json()
    acknowledged: set[str] = set()
    statuses: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def send(seed: int) -> None:
        client: FlaskClient = app.test_client()
        rng = random.Random(seed)
        deadline = time.monotonic() + 60
        for _ in range(2_000):  # bounded in count and time
            if stop.is_set() or time.monotonic() > deadline:
                return
            reports = [make_report(config, "a", rng) for _ in range(rng.choice((1, 5)))]
            reply = client.post("/v1/reports", json=reports[0] if len(reports) == 1
                                else {"reports": reports})
            with lock:
                statuses.append(reply.status_code)
                if reply.status_code in (200, 201):
                    body = reply.get_json()
                    for result in body.get("results", [body]):
                        if result["status"] in ("accepted", "duplicate"):
                            acknowledged.add(result["report_id"])

    threads = [threading.Thread(target=send, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    own_postgres.halt()  # in the middle of commits, group commits among them
    time.sleep(0.5)
    own_postgres.resume()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(90)
    assert set(statuses) <= {200, 201, 503}, sorted(set(statuses))
    assert 503 in statuses and acknowledged
    stored = [bytes(row[0]).hex() for row in query(url, "SELECT report_id FROM reports")]
    assert len(stored) == len(set(stored))  # none twice
    assert acknowledged <= set(stored)  # none lost


@pytest.mark.sqlite_only
def test_sqlite_locked_past_the_busy_timeout_answers_503_and_logs_it_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    database = str(tmp_path / "chorus.db")
    app = _app(database, FakeClock())
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("locked"),
                       headers=ADMIN_HEADERS).get_json()
    rng = random.Random(2)
    assert http.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 201
    # This thread's connection (the test client runs requests here) waits 0.1 s, not 30.
    app.extensions["chorus.storage"].connect().execute("PRAGMA busy_timeout=100")
    other = sqlite3.connect(database, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        for _ in range(5):
            _assert_unavailable(http.post("/v1/reports", json=make_report(config, "b", rng)))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert http.post("/v1/reports", json=make_report(config, "c", rng)).status_code == 201
    started, ended, tracebacks = _outage_lines(caplog)
    assert len(started) == 1 and "database is locked" in started[0]
    assert len(ended) == 1 and tracebacks == []
    assert query(database, "SELECT count(*) FROM reports") == [(2,)]
