"""Ingest and release rules at their exact boundaries, metrics, access, logs and retention
(the Janus way: one test per rule, last accepted value and first rejected value)."""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_client import Client
from chorus_collector.jobs.folding import fold
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    FlaskBridge,
    campaign_spec,
    make_report,
    query,
)

Create = Callable[..., dict[str, Any]]
CATEGORIES = [f"c{i}" for i in range(12)]


def test_payload_size_boundary(make_app: Callable[..., Flask], rng: random.Random) -> None:
    http = make_app(MAX_PAYLOAD_BYTES=1).test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b", domain=CATEGORIES),
                       headers=ADMIN_HEADERS).get_json()
    one_byte = make_report(config, "c0", rng, payload=9)  # canonical JSON "9"
    two_bytes = make_report(config, "c0", rng, payload=10)  # "10"
    body = http.post("/v1/reports", json={"reports": [one_byte, two_bytes]}).get_json()
    assert [r["status"] for r in body["results"]] == ["accepted", "rejected"]
    assert body["results"][1]["error"] == "report-too-large"
    assert "at most 1" in body["results"][1]["detail"]


def test_nan_and_infinity_are_not_json(http: FlaskClient, create: Create) -> None:
    create("b")
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        reply = http.post("/v1/reports", data=b'{"reports": [' + literal + b"]}",
                          content_type="application/json")
        assert reply.status_code == 400
        assert reply.get_json()["type"].endswith("malformed-json")


def test_rate_limit_boundary(make_app: Callable[..., Flask], rng: random.Random) -> None:
    app = make_app(RATE_LIMIT=1, RATE_BURST=3)
    limiter = app.extensions["chorus.ratelimit"]
    limiter.clock = FakeClock(100.0)
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS).get_json()
    send = lambda: http.post("/v1/reports", json=make_report(config, "a", rng))  # noqa: E731
    assert [send().status_code for _ in range(3)] == [201, 201, 201]  # the burst
    refused = send()
    assert refused.status_code == 429
    assert refused.get_json()["type"].endswith("rate-limited")
    assert refused.headers["Retry-After"] == "1"
    limiter.clock.now += 0.999
    assert send().status_code == 429  # not yet a whole token
    limiter.clock.now += 0.002
    assert send().status_code == 201
    other = http.post("/v1/reports", json=make_report(config, "a", rng),
                      environ_base={"REMOTE_ADDR": "192.0.2.9"})
    assert other.status_code == 201  # buckets are per address
    # Estimates and config reads are not rate limited.
    assert http.get("/v1/campaigns/b").status_code == 200


def test_ingest_key_when_configured(make_app: Callable[..., Flask], rng: random.Random,
                                    clock: FakeClock) -> None:
    app = make_app(INGEST_KEY="app-key")
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS).get_json()
    report = make_report(config, "a", rng)
    assert http.post("/v1/reports", json=report).status_code == 401
    assert http.post("/v1/reports", json=report,
                     headers={"Authorization": "Bearer nope"}).status_code == 401
    assert http.post("/v1/reports", json=report,
                     headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 403
    assert http.post("/v1/reports", json=report,
                     headers={"Authorization": "Bearer app-key"}).status_code == 201
    client = Client("http://collector.test", transport=FlaskBridge(app), ingest_key="app-key",
                    clock=clock, ephemeral=True, allow_unpinned=True, send_delay=0.0)
    client.report("b", "c")
    assert client.flush().accepted == 1
    assert http.get("/v1/campaigns/b").status_code == 200  # reading configs stays open


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line
                                                 for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{wanted}}} not in metrics")


def test_metrics_count_outcomes_per_campaign(http: FlaskClient, create: Create,
                                             rng: random.Random) -> None:
    config = create("browser")
    good = [make_report(config, "a", rng) for _ in range(3)]
    batch = [*good, good[0], {**good[1], "payload": 9}, make_report(config, "a", rng, time=0)]
    http.post("/v1/reports", json={"reports": batch})
    http.post("/v1/reports", data=b"{", content_type="application/json")
    reply = http.get("/metrics")
    assert reply.status_code == 200
    assert reply.mimetype == "text/plain"
    text = reply.get_data(as_text=True)
    assert _metric(text, "chorus_reports_total", campaign="browser", outcome="accepted") == 3
    assert _metric(text, "chorus_reports_total", campaign="browser", outcome="duplicate") == 1
    assert _metric(text, "chorus_reports_total", campaign="browser",
                   outcome="invalid-report") == 1
    assert _metric(text, "chorus_reports_total", campaign="browser",
                   outcome="report-expired") == 1
    assert _metric(text, "chorus_requests_rejected_total", reason="malformed-json") == 1
    assert _metric(text, "chorus_request_duration_seconds_count", method="POST",
                   route="/v1/reports", status="200") == 1
    # The fold job's lag: three reports appended, none folded yet, never folded.
    assert _metric(text, "chorus_reports_unfolded") == 3
    assert "chorus_fold_age_seconds NaN" in text


def test_metrics_count_the_writers_of_each_group_commit(http: FlaskClient, create: Create,
                                                       rng: random.Random) -> None:
    """One request at a time: each single report and each batch is a group commit of its
    own (the test client sends them one after another)."""
    config = create("browser")
    for _ in range(2):
        assert http.post("/v1/reports", json=make_report(config, "a", rng)).status_code == 201
    batch = [make_report(config, "a", rng) for _ in range(3)]
    assert http.post("/v1/reports", json={"reports": batch}).status_code == 200
    text = http.get("/metrics").get_data(as_text=True)
    assert _metric(text, "chorus_group_commit_writers_count") == 3
    assert _metric(text, "chorus_group_commit_writers_sum") == 3
    assert _metric(text, "chorus_group_commit_writers_bucket", le="1.0") == 3


def test_metrics_show_how_far_the_fold_job_lags(http: FlaskClient, create: Create,
                                               rng: random.Random, app: Flask,
                                               clock: FakeClock) -> None:
    config = create("browser")
    http.post("/v1/reports", json={"reports": [make_report(config, "a", rng)
                                               for _ in range(4)]})
    fold(app.extensions["chorus.storage"], clock=clock)
    clock.now += 90
    http.post("/v1/reports", json=make_report(config, "b", rng))
    text = http.get("/metrics").get_data(as_text=True)
    assert _metric(text, "chorus_reports_unfolded") == 1
    assert _metric(text, "chorus_fold_age_seconds") == 90


def test_metrics_token_when_configured(make_app: Callable[..., Flask]) -> None:
    http = make_app(METRICS_TOKEN="scrape").test_client()
    assert http.get("/metrics").status_code == 401
    assert http.get("/metrics", headers={"Authorization": f"Bearer {ANALYST}"}).status_code \
        == 403
    assert http.get("/metrics", headers={"Authorization": "Bearer scrape"}).status_code == 200
    assert http.get("/metrics", headers=ADMIN_HEADERS).status_code == 200


def test_logs_carry_no_tokens_payloads_or_addresses(http: FlaskClient, create: Create,
                                                    rng: random.Random,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        config = create("urls", mechanism="rappor")
        report = make_report(config, "https://private.example/", rng)
        address = {"REMOTE_ADDR": "198.51.100.23"}
        http.post("/v1/reports", json=report, environ_base=address)
        http.post("/v1/reports", json={**report, "payload": {"cohort": 0, "bits": "zz"}},
                  environ_base=address)
        http.get("/v1/campaigns/urls/estimates?candidate=x", headers=ANALYST_HEADERS,
                 environ_base=address)
        http.get("/v1/campaigns", headers={"Authorization": "Bearer guessed-token"},
                 environ_base=address)
    text = caplog.text
    assert "POST /v1/reports 201" in text  # the request log is there…
    for secret in (ADMIN, ANALYST, "guessed-token", "198.51.100.23", report["payload"]["bits"],
                   report["report_id"], "private.example"):
        assert secret not in text  # …without any of these


def test_gc_drops_expired_reports_and_keeps_their_statistics(
        http: FlaskClient, create: Create, rng: random.Random, clock: FakeClock, app: Flask,
        database: str) -> None:
    config = create("browser", report_expiry=86400)
    old = [make_report(config, "a", rng, time=int(NOW) - 86400) for _ in range(3)]
    new = [make_report(config, "b", rng) for _ in range(2)]
    http.post("/v1/reports", json={"reports": old + new})
    before = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_data()
    storage = app.extensions["chorus.storage"]
    fold(storage)
    assert storage.drop_expired(clock.now, margin=0) == 0  # exactly at the expiry: kept
    clock.now += 1
    replay = http.post("/v1/reports", json=old[0])  # refused before its ID is looked up
    assert replay.status_code == 400
    assert replay.get_json()["type"].endswith("report-expired")
    assert storage.drop_expired(clock.now, margin=60) == 0  # within the margin: kept
    clock.now += 60
    assert storage.drop_expired(clock.now, margin=60) == 3
    assert storage.drop_expired(clock.now, margin=60) == 0
    ids = {bytes(row[0]).hex() for row in query(database, "SELECT report_id FROM reports")}
    assert ids == {r["report_id"] for r in new}  # the expired rows are gone whole
    replay = http.post("/v1/reports", json=old[0])
    assert replay.status_code == 400
    assert replay.get_json()["type"].endswith("report-expired")
    after = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_data()
    assert json.loads(after)["n"] == json.loads(before)["n"] == 5
    assert json.loads(after)["rows"] == json.loads(before)["rows"]
    assert json.loads(before)["freshness"]["unfolded_reports"] == 5
    assert json.loads(after)["freshness"]["unfolded_reports"] == 0


def test_gc_command(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from chorus_collector.cli import main

    missing = CliRunner().invoke(main, ["gc", "--database", str(tmp_path / "x.db")])
    assert missing.exit_code != 0
    assert "no such database" in missing.output
    assert not (tmp_path / "x.db").exists()  # a wrong path does not create a database
    from chorus_collector.storage import SQLiteStorage

    SQLiteStorage(str(tmp_path / "x.db")).migrate()
    result = CliRunner().invoke(main, ["gc", "--database", str(tmp_path / "x.db")])
    assert result.exit_code == 0
    assert "dropped 0 expired reports" in result.output


def test_a_database_of_another_application_is_refused(tmp_path: Path) -> None:
    import sqlite_utils
    from sqlite_utils.migrations import Migrations

    from chorus_collector.storage import SchemaError, SQLiteStorage

    other = Migrations("someone-else")

    @other()
    def m001(db: sqlite_utils.Database) -> None:
        db.execute("CREATE TABLE campaigns (x TEXT)")

    path = tmp_path / "other.db"
    other.apply(sqlite_utils.Database(path))
    with pytest.raises(SchemaError, match="not a Chorus database"):
        SQLiteStorage(str(path)).migrate()


def test_rate_limit_behind_a_proxy_uses_the_forwarded_address(
        make_app: Callable[..., Flask], rng: random.Random) -> None:
    app = make_app(RATE_LIMIT=1, RATE_BURST=1, PROXY_HOPS=1)
    app.extensions["chorus.ratelimit"].clock = FakeClock(5.0)
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS).get_json()

    def send(client_address: str) -> int:
        return http.post("/v1/reports", json=make_report(config, "a", rng),
                         headers={"X-Forwarded-For": client_address}).status_code

    assert [send("192.0.2.1"), send("192.0.2.1"), send("192.0.2.2")] == [201, 429, 201]


def test_a_single_report_over_the_payload_limit_is_413(make_app: Callable[..., Flask],
                                                       rng: random.Random) -> None:
    http = make_app(MAX_PAYLOAD_BYTES=1).test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b", domain=CATEGORIES),
                       headers=ADMIN_HEADERS).get_json()
    reply = http.post("/v1/reports", json=make_report(config, "c0", rng, payload=10))
    assert reply.status_code == 413
    assert reply.get_json()["type"].endswith("report-too-large")


def test_campaigns_stored_with_memoization_are_migrated_and_keep_their_reports(
        tmp_path: Path) -> None:
    """Configs written before memoization was withdrawn (privacy.memoize, Duchi's buckets)
    still load after the upgrade, with their reports; listing and scrubbing work."""
    import json

    from chorus_collector.storage import SQLiteStorage
    from chorus_shared import campaign_from_spec
    from chorus_shared.campaign import canonical_json

    path = tmp_path / "old.db"
    SQLiteStorage(str(path)).migrate()
    modern = campaign_from_spec({"name": "lat", "mechanism": "duchi", "epsilon": 1.0,
                                 "domain": {"kind": "numeric", "lo": 0, "hi": 10}})
    legacy = json.loads(canonical_json(modern.config))
    legacy["privacy"]["memoize"] = True
    legacy["params"]["buckets"] = 32
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO campaigns (id, name, digest, config) VALUES (7, 'lat', ?, ?)",
                   ("ab" * 32, json.dumps(legacy)))
        db.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                   "VALUES (7, x'00112233', 0, '1')")
        db.execute("DELETE FROM _sqlite_migrations WHERE name = "
                   "'m003_policies_without_memoization'")
    storage = SQLiteStorage(str(path))
    storage.migrate()
    stored = storage.get_campaign("lat")
    assert stored is not None and stored.id == 7
    assert stored.campaign.digest == modern.digest
    assert [s.campaign.name for s in storage.list_campaigns()] == ["lat"]
    assert fold(storage) == 1
    assert storage.drop_expired(now=10**10, margin=0) == 1  # the old report is still attached


def test_a_failing_metrics_store_never_fails_a_request(make_app: Callable[..., Flask],
                                                      rng: random.Random) -> None:
    """Regression (issue 13 #5): under SIGTERM the master removed the metrics directory while
    a draining worker still answered, and a committed report got a 500."""
    app = make_app()
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("m"), headers=ADMIN_HEADERS).get_json()

    class Broken:
        def labels(self, *args: object) -> object:
            raise FileNotFoundError("counter_12345.db")

    metrics = app.extensions["chorus.metrics"]
    metrics.reports = metrics.latency = metrics.requests_rejected = Broken()
    reply = http.post("/v1/reports", json={"reports": [make_report(config, "a", rng)]})
    assert reply.status_code == 200 and reply.get_json()["accepted"] == 1
    assert http.post("/v1/reports", data=b"{", content_type="application/json").status_code \
        == 400


def test_settings_errors_are_one_line_and_exit_two(tmp_path: Path) -> None:
    """Regression (issue 13 #13): a wrong setting printed a 25-line traceback."""
    import subprocess
    import sys

    script = Path(sys.executable).with_name("chorus")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CHORUS_WORKERS": "many",
           "CHORUS_DATABASE": str(tmp_path / "x.db")}
    done = subprocess.run([str(script), "serve"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and "WORKERS" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_serve_prints_a_startup_summary_without_secrets() -> None:
    from chorus_collector.server.gunicorn import startup_summary
    from chorus_collector.settings import resolve_settings

    summary = startup_summary(resolve_settings({"ADMIN_TOKEN": "s3cret-admin",
                                                "DATABASE": "/data/chorus.db"}))
    assert "database /data/chorus.db" in summary and "admin token set" in summary
    assert "analyst token unset" in summary and "s3cret" not in summary


def test_the_cli_says_what_to_fix(tmp_path: Path) -> None:
    """Regression (issue 13 #13): urllib3's text for an unreachable collector, and a call
    without a token that did not say which variable to set."""
    from click.testing import CliRunner

    from chorus_collector.cli import main
    from chorus_collector.server.process import CollectorProcess

    runner = CliRunner()
    down = runner.invoke(main, ["campaign", "list", "--url", "http://127.0.0.1:9"])
    assert down.exit_code == 1
    assert "cannot reach the collector (check --url or CHORUS_URL)" in down.output
    assert "HTTPConnectionPool" not in down.output
    with CollectorProcess(tmp_path / "c.db", settings={"ADMIN_TOKEN": ADMIN}) as server:
        tokenless = runner.invoke(main, ["campaign", "list", "--url", server.url],
                                  env={"CHORUS_TOKEN": ""})
    assert tokenless.exit_code == 1 and "set CHORUS_TOKEN or pass --token" in tokenless.output


def test_the_version_is_everywhere_an_operator_looks(make_app: Callable[..., Flask]) -> None:
    """Regression (issue 13 #15): no --version, no version in /healthz or the metrics."""
    from importlib.metadata import version

    from click.testing import CliRunner

    from chorus_collector.cli import main

    installed = version("chorus-ldp")
    assert CliRunner().invoke(main, ["--version"]).output.strip() == f"chorus, version {installed}"
    http = make_app().test_client()
    assert http.get("/healthz").get_json() == {"status": "ok", "version": installed}
    metrics = http.get("/metrics").get_data(as_text=True)
    assert f'chorus_build_info{{version="{installed}"}} 1.0' in metrics


def test_the_license_file_matches_the_declared_license() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[3]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (root / "LICENSE").read_text()[:200]
    assert "Version 2.0, January 2004" in (root / "LICENSE").read_text()[:300]


@pytest.mark.slow
def test_metrics_survive_one_worker_exiting(tmp_path: Path) -> None:
    """Regression: a worker leaving gunicorn's run() removed the metrics directory that
    every worker shares, and /metrics answered 500 for the rest of the server's life."""
    import signal
    import subprocess

    import requests

    from chorus_collector.server.process import CollectorProcess

    with CollectorProcess(tmp_path / "c.db", settings={"ADMIN_TOKEN": ADMIN,
                                                       "WORKERS": "2"}) as server:
        def workers() -> list[str]:
            return subprocess.run(["pgrep", "-P", str(server.process.pid)],
                                  capture_output=True, text=True).stdout.split()

        def wait_for(condition: Callable[[list[str]], bool]) -> list[str]:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if condition(now := workers()):
                    return now
                time.sleep(0.2)
            raise AssertionError(f"gunicorn's workers: {workers()}")

        first = wait_for(lambda now: len(now) == 2)
        os.kill(int(first[0]), signal.SIGTERM)  # gunicorn starts a successor
        wait_for(lambda now: len(now) == 2 and first[0] not in now)
        answers = [requests.get(f"{server.url}/metrics", timeout=10) for _ in range(8)]
        assert [a.status_code for a in answers] == [200] * 8
        assert all("chorus_build_info" in a.text for a in answers)
