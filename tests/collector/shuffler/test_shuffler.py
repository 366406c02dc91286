"""The shuffler: intake, durability, thresholds, the shuffle itself, what it stores, the
collector's record of shuffled batches and the central bound in estimates, admission control
against a collector that injects reports, crash recovery, bad input, the campaign proxy,
settings, and one run over real HTTP on loopback."""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlite_utils
import yaml
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector import create_app
from chorus_collector.cli.formatting import format_estimates
from chorus_collector.ingest.shuffled_batches import NO_INJECTION
from chorus_collector.ingest.shuffling import ASSUMPTIONS, central_privacy
from chorus_collector.server.process import CollectorProcess, free_port
from chorus_collector.settings import SettingsError, resolve_settings
from chorus_collector.shuffler.app import create_shuffler_app
from chorus_collector.shuffler.forward import (
    SHUFFLED_BATCH_HEADER,
    SHUFFLED_SENDERS_HEADER,
    Forwarder,
    UpstreamError,
    UpstreamReply,
)
from chorus_collector.shuffler.pool import pool_migrations
from chorus_collector.shuffler.settings import resolve_shuffler_settings
from chorus_collector.storage import migrations, open_storage
from chorus_shared import campaign_from_config
from chorus_shared.admission import mint_admission_credential
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    chi2_band,
)
from helpers.support import campaign_spec as spec_for

KEY = "shuffler-secret-key"
KEY_HEADERS = {"Authorization": f"Bearer {KEY}"}
# Shared by the shuffler and the app's backend only; the collector never learns them.
ADMISSION = "5f0e" * 16
ROTATED = "91ab" * 16
ELSEWHERE = "c3d2" * 16  # a secret of some other deployment
BASE = "http://collector.test"
PROBLEM = "application/problem+json"


# -- helpers --------------------------------------------------------------------------------------


@dataclass
class Sent:
    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]


class Crash(BaseException):
    """The shuffler process dying (not an Exception: nothing in the code may swallow it)."""


@dataclass
class CollectorUpstream:
    """The shuffler's way to the collector, in process; records requests, injects faults."""

    app: Flask
    sent: list[Sent] = field(default_factory=list)
    down: bool = False  # no answer at all
    fail_with: int | None = None  # answer this status without delivering
    crash_after_delivery: bool = False  # the collector commits, then the shuffler dies

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> UpstreamReply:
        assert timeout > 0
        self.sent.append(Sent(method, url, body, dict(headers)))
        if self.down:
            raise UpstreamError("connection refused")
        if self.fail_with is not None:
            return UpstreamReply(self.fail_with, b'{"type": "x"}', {})
        reply = self.app.test_client().open(url.removeprefix(BASE), method=method, data=body,
                                            headers=dict(headers))
        if self.crash_after_delivery:
            self.crash_after_delivery = False
            raise Crash
        return UpstreamReply(reply.status_code, reply.get_data(), dict(reply.headers))

    def batches(self) -> list[list[dict[str, Any]]]:
        return [json.loads(s.body or b"")["reports"] for s in self.sent
                if s.method == "POST"]


@dataclass
class AcceptingUpstream:
    """A collector stand-in that accepts every report and records each batch."""

    sent: list[Sent] = field(default_factory=list)

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> UpstreamReply:
        self.sent.append(Sent(method, url, body, dict(headers)))
        reports = json.loads(body or b"")["reports"]
        results = [{"report_id": r["report_id"], "status": "accepted"} for r in reports]
        return UpstreamReply(200, json.dumps({"results": results}).encode(),
                             {"Content-Type": "application/json"})


def shuffler_config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return {"DATABASE": str(tmp_path / "pool.db"), "SHUFFLER_KEY": KEY, "ADMIN_TOKEN": ADMIN,
            "COLLECTOR_URL": BASE, "MIN_BATCH": 5, "MAX_BATCH": 10, "FORWARD_INTERVAL": 0,
            **overrides}


def envelope(index: int = 0, *, digest: str = "d" * 64, when: int = 3600,
             payload: Any = 1, report_id: str | None = None) -> dict[str, Any]:
    return {"report_id": report_id or secrets.token_hex(16), "digest": digest, "time": when,
            "payload": payload}


def credential(secret: str = ADMISSION, **kwargs: Any) -> dict[str, str]:
    """The Authorization header of one install, as the app's backend mints it."""
    return {"Authorization": f"Bearer {mint_admission_credential(secret, **kwargs)}"}


def pool_rows(tmp_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "pool.db") as conn:
        return conn.execute("SELECT digest, report_id, time, payload, batch FROM pool").fetchall()


@pytest.fixture
def collector(tmp_path: Path, clock: FakeClock) -> Flask:
    return create_app({"DATABASE": str(tmp_path / "chorus.db"), "ADMIN_TOKEN": ADMIN,
                       "ANALYST_TOKEN": ANALYST, "SHUFFLER_KEY": KEY}, clock=clock)


@pytest.fixture
def upstream(collector: Flask) -> CollectorUpstream:
    return CollectorUpstream(collector)


@pytest.fixture
def make_shuffler(tmp_path: Path, upstream: CollectorUpstream) -> Callable[..., Flask]:
    def factory(upstream_: Any = None, **overrides: Any) -> Flask:
        return create_shuffler_app(shuffler_config(tmp_path, **overrides),
                                   upstream=upstream_ or upstream)

    return factory


@pytest.fixture
def shuffler(make_shuffler: Callable[..., Flask]) -> FlaskClient:
    return make_shuffler().test_client()


def create_campaign(collector: Flask, name: str = "survey", **overrides: Any) -> dict[str, Any]:
    reply = collector.test_client().post("/v1/campaigns", json=spec_for(name, **overrides),
                                         headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config: dict[str, Any] = reply.get_json()
    return config


def client_reports(config: dict[str, Any], count: int, rng: random.Random,
                   now: float = NOW) -> list[dict[str, Any]]:
    """Reports as a client makes them: randomized k-RR payloads of the campaign."""
    campaign = campaign_from_config(config)
    mechanism = campaign.mechanism
    values = config["domain"]["values"] if isinstance(config["domain"], dict) else config["domain"]
    return [{"report_id": secrets.token_hex(16), "digest": campaign.digest,
             "time": campaign.time_bucket(now),
             "payload": mechanism.randomize(mechanism.encode(rng.choice(values)), rng)}
            for _ in range(count)]


def flush(shuffler: FlaskClient) -> dict[str, Any]:
    reply = shuffler.post("/v1/flush", headers=ADMIN_HEADERS)
    assert reply.status_code == 200, reply.get_data()
    body: dict[str, Any] = reply.get_json()
    return body


def estimate(collector: Flask, name: str = "survey", **query: Any) -> dict[str, Any]:
    reply = collector.test_client().get(f"/v1/campaigns/{name}/estimates",
                                        query_string=query, headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


# -- intake and durability ------------------------------------------------------------------------


def test_reports_are_pooled_and_acknowledged(shuffler: FlaskClient, tmp_path: Path) -> None:
    reports = [envelope() for _ in range(3)]
    reply = shuffler.post("/v1/reports", json={"reports": reports})
    assert reply.status_code == 200
    assert reply.get_json()["results"] == [{"report_id": r["report_id"], "status": "accepted"}
                                           for r in reports]
    assert len(pool_rows(tmp_path)) == 3
    again = shuffler.post("/v1/reports", json={"reports": reports[:1]}).get_json()
    assert again["results"][0]["status"] == "duplicate"  # a client retry changes nothing
    single = shuffler.post("/v1/reports", json=envelope())
    assert single.status_code == 201
    assert len(pool_rows(tmp_path)) == 4


def test_pool_uses_wal_and_full_synchronous(shuffler: FlaskClient, tmp_path: Path) -> None:
    shuffler.post("/v1/reports", json={"reports": [envelope()]})
    conn = shuffler.application.extensions["chorus.shuffler.pool"].connect()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


class _FailingCommit:
    """A connection whose COMMIT fails (a full disk, an I/O error) after the inserts ran."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().upper() == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)


def test_a_failing_commit_acknowledges_nothing(shuffler: FlaskClient, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pool = shuffler.application.extensions["chorus.shuffler.pool"]
    real = pool._storage.connect()
    monkeypatch.setattr(pool._storage, "connect", lambda: _FailingCommit(real))
    reply = shuffler.post("/v1/reports", json={"reports": [envelope(), envelope()]})
    assert reply.status_code == 503
    assert reply.mimetype == PROBLEM
    assert reply.headers["Retry-After"]
    assert "accepted" not in reply.get_data(as_text=True)
    monkeypatch.undo()
    assert pool_rows(tmp_path) == []  # rolled back: nothing stored, nothing acknowledged


def test_a_failing_insert_acknowledges_nothing(shuffler: FlaskClient, tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "pool.db") as conn:
        conn.execute("CREATE TRIGGER full_disk BEFORE INSERT ON pool "
                     "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    reply = shuffler.post("/v1/reports", json={"reports": [envelope()]})
    assert reply.status_code == 503
    assert reply.get_json()["type"].endswith("/storage-unavailable")
    assert pool_rows(tmp_path) == []


# -- thresholds and batches -----------------------------------------------------------------------


def test_groups_below_the_threshold_are_not_forwarded(
        make_shuffler: Callable[..., Flask], tmp_path: Path) -> None:
    fake = AcceptingUpstream()
    http = make_shuffler(fake).test_client()
    # 4 + 4 reports of one campaign in two time buckets, 4 of another: no group reaches 5.
    reports = ([envelope(when=3600) for _ in range(4)] + [envelope(when=7200) for _ in range(4)]
               + [envelope(digest="e" * 64) for _ in range(4)])
    http.post("/v1/reports", json={"reports": reports})
    result = flush(http)
    assert fake.sent == []
    assert (result["batches"], result["waiting"], result["claimed"]) == (0, 12, 0)
    http.post("/v1/reports", json={"reports": [envelope(when=7200)]})
    result = flush(http)
    assert [json.loads(s.body or b"")["reports"][0]["time"] for s in fake.sent] == [7200]
    assert len(json.loads(fake.sent[0].body or b"")["reports"]) == 5
    assert (result["batches"], result["reports"], result["waiting"]) == (1, 5, 8)
    assert all(row[2] != 7200 for row in pool_rows(tmp_path))  # deleted once acknowledged


def test_a_large_group_splits_into_batches_of_at_least_min_batch(
        make_shuffler: Callable[..., Flask]) -> None:
    fake = AcceptingUpstream()
    http = make_shuffler(fake).test_client()
    reports = [envelope() for _ in range(23)]
    http.post("/v1/reports", json={"reports": reports})
    flush(http)
    sizes = sorted(len(json.loads(s.body or b"")["reports"]) for s in fake.sent)
    assert sizes == [7, 8, 8]  # ceil(23 / 10) = 3 near-equal batches, each >= MIN_BATCH
    assert [s.headers[SHUFFLED_BATCH_HEADER] for s in fake.sent] == \
        [str(len(json.loads(s.body or b"")["reports"])) for s in fake.sent]
    forwarded = sorted(r["report_id"] for s in fake.sent
                       for r in json.loads(s.body or b"")["reports"])
    assert forwarded == sorted(r["report_id"] for r in reports)


def test_forwarded_batches_carry_the_key_and_no_client_headers(
        make_shuffler: Callable[..., Flask]) -> None:
    fake = AcceptingUpstream()
    http = make_shuffler(fake).test_client()
    http.post("/v1/reports", json={"reports": [envelope() for _ in range(5)]},
              headers={"Cookie": "track=install-4711", "User-Agent": "app/1.2 (device 7)",
                       "X-Forwarded-For": "203.0.113.9"},
              environ_base={"REMOTE_ADDR": "198.51.100.77"})
    flush(http)
    (sent,) = fake.sent
    assert sent.url == f"{BASE}/v1/reports"
    assert sent.headers == {"Content-Type": "application/json",
                            "Authorization": f"Bearer {KEY}", SHUFFLED_BATCH_HEADER: "5",
                            "User-Agent": "chorus-shuffler"}
    body = (sent.body or b"").decode()
    for marker in ("install-4711", "device 7", "203.0.113.9", "198.51.100.77"):
        assert marker not in body


# -- the shuffle ----------------------------------------------------------------------------------


def test_forwarded_order_is_a_uniform_permutation_of_arrival_order(tmp_path: Path) -> None:
    """m reports per group, arriving in a known order with report IDs that *increase* with
    arrival (so an unshuffled forward, in table order, would be the arrival order). Over R
    groups the arrival-index × forwarded-position table of a uniform random permutation has
    every cell's expectation R/m, and its Pearson statistic S satisfies S·(m−1)/m ~
    χ²((m−1)²): the covariance of one permutation matrix is (P ⊗ P)/(m − 1) with P = I − J/m,
    a projection of rank (m − 1)². Two-sided band at α = 10⁻⁶ (too regular fails too, e.g. a
    rotation). The rng is seeded, so the test is exact; production uses the OS CSPRNG."""
    m, groups = 8, 300
    fake = AcceptingUpstream()
    app = create_shuffler_app(shuffler_config(tmp_path, MIN_BATCH=m, MAX_BATCH=2 * m),
                              upstream=fake, rng=random.Random(20261130))
    reports = [envelope(when=3600 * (g + 1), report_id=f"{g:016x}{i:016x}")
               for g in range(groups) for i in range(m)]
    http = app.test_client()
    for start in range(0, len(reports), 1000):  # arrival order: group by group, i = 0..m−1
        assert http.post("/v1/reports",
                         json={"reports": reports[start:start + 1000]}).status_code == 200
    assert flush(http)["batches"] == groups
    table = [[0] * m for _ in range(m)]
    for sent in fake.sent:
        batch = json.loads(sent.body or b"")["reports"]
        assert len(batch) == m
        for position, report in enumerate(batch):
            table[int(report["report_id"][16:], 16)][position] += 1
    expected = groups / m
    statistic = sum((cell - expected) ** 2 / expected for row in table for cell in row)
    dof = (m - 1) ** 2
    low, high = chi2_band(dof, 1e-6)
    assert low <= statistic * (m - 1) / m / dof <= high, statistic
    assert sum(table[i][i] for i in range(m)) < groups  # not the identity, obviously


def test_the_default_shuffle_uses_the_os_csprng(shuffler: FlaskClient) -> None:
    forwarder: Forwarder = shuffler.application.extensions["chorus.shuffler.forwarder"]
    assert isinstance(forwarder.rng, secrets.SystemRandom)
    assert "shuffler-secret-key" not in repr(forwarder)


# -- nothing identifying is stored ----------------------------------------------------------------


def test_the_pool_stores_nothing_about_the_sender(shuffler: FlaskClient, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """§5.4 check 4: the schema holds the report, a batch ID and (with admission only) a
    sender tag, nothing else; the table has no rowid (no insertion order), and no request
    leaves a log line."""
    caplog.set_level("DEBUG")
    reply = shuffler.post("/v1/reports", json={"reports": [envelope() for _ in range(3)]},
                          headers={"Cookie": "track=install-4711", "User-Agent": "app/9 (x)",
                                   "X-Forwarded-For": "203.0.113.9"},
                          environ_base={"REMOTE_ADDR": "198.51.100.77"})
    assert reply.status_code == 200
    assert caplog.records == []
    with sqlite3.connect(tmp_path / "pool.db") as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"pool", "pool_key", "held", "_sqlite_migrations"}
        columns = [r[1] for r in conn.execute("PRAGMA table_info(pool)")]
        assert columns == ["digest", "report_id", "time", "payload", "batch", "sender"]
        # Per batch the collector refused as too large: counts and a retry time, no report.
        columns = [r[1] for r in conn.execute("PRAGMA table_info(held)")]
        assert columns == ["batch", "reports", "bytes", "refusals", "retry_at"]
        assert {r[0] for r in conn.execute("SELECT sender FROM pool")} == {None}
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'pool'").fetchone()[0]
        assert "WITHOUT ROWID" in sql
        with pytest.raises(sqlite3.OperationalError, match="rowid"):
            conn.execute("SELECT rowid FROM pool")
        conn.execute("PRAGMA wal_checkpoint(FULL)")
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("pool.db*") if p.is_file())
    for marker in (b"install-4711", b"app/9", b"203.0.113.9", b"198.51.100.77"):
        assert marker not in stored


def test_the_shuffler_keeps_no_secret_in_its_config(shuffler: FlaskClient) -> None:
    assert KEY not in json.dumps(shuffler.application.config["CHORUS_SHUFFLER"])
    assert ADMIN not in json.dumps(shuffler.application.config["CHORUS_SHUFFLER"])


# -- the collector's side -------------------------------------------------------------------------


def test_collector_records_the_batch_and_the_estimate_states_the_central_bound(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        rng: random.Random) -> None:
    config = create_campaign(collector)
    http = make_shuffler(MIN_BATCH=20, MAX_BATCH=40).test_client()
    shuffled = client_reports(config, 30, rng)
    direct = client_reports(config, 5, rng)
    http.post("/v1/reports", json={"reports": shuffled})
    collector.test_client().post("/v1/reports", json={"reports": direct})
    result = flush(http)
    assert (result["batches"], result["accepted"], result["waiting"]) == (1, 30, 0)
    body = estimate(collector)
    assert body["n"] == 35
    assert body["epsilon"] == 1.5  # the local statement stays as it is
    shuffling = body["shuffling"]
    assert (shuffling["reports_shuffled"], shuffling["reports_direct"]) == (30, 5)
    assert (shuffling["batches"], shuffling["smallest_batch"]) == (1, 30)
    assert shuffling["epsilon0"] == 1.5
    # No admission control: the figure is the bound at n = 30 reports, and it says, first in
    # its notes and first among its assumptions, that it assumes no injected reports.
    bound = central_privacy(1.5, 30)
    assert shuffling["central"] == {**bound, "assumptions": [NO_INJECTION, *ASSUMPTIONS]}
    assert shuffling["central"]["epsilon"] <= 1.5
    assert (shuffling["n_basis"], shuffling["vouched_batches"]) == \
        ("reports-assuming-no-injection", 0)
    assert shuffling["smallest_senders"] is None
    assert shuffling["notes"][0].startswith("This central (ε, δ) assumes no injected reports")
    assert "1 of 1 batches" in shuffling["notes"][0]
    assert any("covers only the 30" in note for note in shuffling["notes"])
    # The CSV keeps its columns; only the JSON carries the shuffling object.
    csv = collector.test_client().get("/v1/campaigns/survey/estimates?format=csv",
                                      headers=ANALYST_HEADERS).get_data(as_text=True)
    assert "shuffl" not in csv
    with sqlite3.connect(collector.extensions["chorus.storage"].path) as conn:
        rows = conn.execute("SELECT time, batches, reports, smallest, vouched_batches, "
                            "smallest_senders FROM shuffled_batches")
        assert rows.fetchall() == [(shuffled[0]["time"], 1, 30, 30, 0, None)]


def test_an_estimate_without_shuffled_reports_has_no_shuffling_object(
        collector: Flask, rng: random.Random) -> None:
    config = create_campaign(collector)
    collector.test_client().post("/v1/reports", json={"reports": client_reports(config, 5, rng)})
    assert "shuffling" not in estimate(collector)


def test_the_estimate_uses_the_smallest_batch_of_the_window(
        collector: Flask, make_shuffler: Callable[..., Flask], rng: random.Random) -> None:
    config = create_campaign(collector, min_batch_size=1)
    http = make_shuffler(MIN_BATCH=10, MAX_BATCH=100).test_client()
    http.post("/v1/reports", json={"reports": client_reports(config, 12, rng)})
    flush(http)
    http.post("/v1/reports", json={"reports": client_reports(config, 40, rng)})
    flush(http)
    shuffling = estimate(collector)["shuffling"]
    assert (shuffling["batches"], shuffling["smallest_batch"]) == (2, 12)
    assert shuffling["reports_direct"] == 0
    assert any("all reports" in note for note in shuffling["notes"])


def test_the_collector_ignores_the_batch_header_without_the_key(
        collector: Flask, rng: random.Random) -> None:
    config = create_campaign(collector)
    http = collector.test_client()
    for headers in ({SHUFFLED_BATCH_HEADER: "3"},
                    {SHUFFLED_BATCH_HEADER: "3", "Authorization": "Bearer not-the-key"}):
        reply = http.post("/v1/reports", json={"reports": client_reports(config, 3, rng)},
                          headers=headers)
        assert reply.status_code == 200
        assert reply.get_json()["accepted"] == 3  # counted, as sent directly
    body = estimate(collector)
    assert body["n"] == 6
    assert "shuffling" not in body
    with sqlite3.connect(collector.extensions["chorus.storage"].path) as conn:
        assert conn.execute("SELECT count(*) FROM shuffled_batches").fetchone()[0] == 0


def test_a_collector_without_a_shuffler_key_never_records_batches(
        make_app: Callable[..., Flask], rng: random.Random) -> None:
    app = make_app()  # no SHUFFLER_KEY
    config = create_campaign(app)
    reply = app.test_client().post("/v1/reports",
                                   json={"reports": client_reports(config, 3, rng)},
                                   headers={SHUFFLED_BATCH_HEADER: "3", **KEY_HEADERS})
    assert reply.get_json()["accepted"] == 3
    assert "shuffling" not in estimate(app)


def test_a_wrong_batch_size_is_refused_and_writes_nothing(
        collector: Flask, rng: random.Random) -> None:
    config = create_campaign(collector)
    for declared in ("4", "abc", "", "-3"):
        reply = collector.test_client().post(
            "/v1/reports", json={"reports": client_reports(config, 3, rng)},
            headers={SHUFFLED_BATCH_HEADER: declared, **KEY_HEADERS})
        assert reply.status_code == 400
        assert reply.mimetype == PROBLEM
        assert reply.get_json()["type"].endswith("/invalid-shuffled-batch")
    reply = collector.test_client().get("/v1/campaigns/survey/estimates",
                                        headers=ANALYST_HEADERS)
    assert reply.status_code == 409  # no reports at all


def test_the_shuffler_key_admits_batches_where_an_ingest_key_is_required(
        tmp_path: Path, clock: FakeClock, rng: random.Random) -> None:
    app = create_app({"DATABASE": str(tmp_path / "c.db"), "ADMIN_TOKEN": ADMIN,
                      "ANALYST_TOKEN": ANALYST, "SHUFFLER_KEY": KEY, "INGEST_KEY": "ingest"},
                     clock=clock)
    config = create_campaign(app)
    http = app.test_client()
    assert http.post("/v1/reports", json={"reports": client_reports(config, 2, rng)}
                     ).status_code == 401
    reply = http.post("/v1/reports", json={"reports": client_reports(config, 2, rng)},
                      headers={SHUFFLED_BATCH_HEADER: "2", **KEY_HEADERS})
    assert reply.status_code == 200
    assert reply.get_json()["accepted"] == 2
    # The key alone, without the batch header, is not an ingest key.
    assert http.post("/v1/reports", json={"reports": client_reports(config, 2, rng)},
                     headers=KEY_HEADERS).status_code == 403


# -- admission control against a collector that injects reports -----------------------------------


@pytest.fixture
def admitted(make_shuffler: Callable[..., Flask]) -> Callable[..., Flask]:
    """A shuffler with admission control: the secrets only the app's backend shares."""
    def factory(upstream_: Any = None, **overrides: Any) -> Flask:
        return make_shuffler(upstream_, ADMISSION_SECRETS=f"{ADMISSION}, {ROTATED}",
                             **overrides)

    return factory


def test_a_collector_without_credentials_cannot_post_or_complete_a_batch(
        admitted: Callable[..., Flask], tmp_path: Path) -> None:
    """The attack of the review: the collector posts MIN_BATCH − 1 reports of its own to the
    shuffler so that one install's report completes the batch, alone among fakes. With
    admission each of its requests is refused (401), with or without the keys it does know,
    and the one honest report waits: a batch needs MIN_BATCH admitted senders."""
    fake = AcceptingUpstream()
    http = admitted(fake).test_client()
    own_keys: list[dict[str, str]] = [{}, KEY_HEADERS, ADMIN_HEADERS,
                                      {"Authorization": f"Bearer {ANALYST}"}]
    for headers in own_keys:
        reply = http.post("/v1/reports", json={"reports": [envelope() for _ in range(4)]},
                          headers=headers)
        assert reply.status_code == 401, (headers, reply.get_data())
        assert reply.mimetype == PROBLEM
        assert reply.get_json()["type"].endswith("/unauthorized")
        assert reply.headers["WWW-Authenticate"].startswith('Bearer realm="chorus-shuffler"')
        single = http.post("/v1/reports", json=envelope(), headers=headers)
        assert single.status_code == 401
    assert pool_rows(tmp_path) == []
    honest = http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert honest.get_json()["accepted"] == 1
    result = flush(http)
    assert fake.sent == []  # the honest report is not released
    assert (result["batches"], result["waiting"]) == (0, 1)


@pytest.mark.parametrize("case", ["forged", "expired", "other-secret", "malformed",
                                  "not-bearer", "empty", "sender-swapped", "expiry-extended"])
def test_forged_expired_or_foreign_credentials_are_refused(
        admitted: Callable[..., Flask], tmp_path: Path, case: str) -> None:
    fake = AcceptingUpstream()
    http = admitted(fake, MIN_BATCH=2, MAX_BATCH=4).test_client()
    good = mint_admission_credential(ADMISSION)
    version, sender, expiry, mac = good.split(".")
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    header = {
        "forged": f"Bearer {version}.{sender}.{expiry}.{flipped}",
        "expired": "Bearer " + mint_admission_credential(ADMISSION, lifetime=60,
                                                         now=time.time() - 3600),
        "other-secret": "Bearer " + mint_admission_credential(ELSEWHERE),
        "malformed": "Bearer v1.not-a-credential",
        "not-bearer": f"Basic {good}",
        "empty": "Bearer ",
        "sender-swapped": f"Bearer {version}.{secrets.token_hex(16)}.{expiry}.{mac}",
        "expiry-extended": f"Bearer {version}.{sender}.{int(expiry) + 86_400}.{mac}",
    }[case]
    for _ in range(3):  # never admitted, however often
        reply = http.post("/v1/reports", json={"reports": [envelope()]},
                          headers={"Authorization": header})
        assert reply.status_code == 401, reply.get_data()
        assert reply.mimetype == PROBLEM
        assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
    if case == "expired":
        assert "expired" in reply.get_json()["detail"]
    assert pool_rows(tmp_path) == []
    http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert flush(http)["batches"] == 0 and fake.sent == []  # one real sender: no batch
    # Both configured secrets admit (a rotation): a second real sender completes it.
    http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential(ROTATED))
    assert flush(http)["batches"] == 1
    assert fake.sent[0].headers[SHUFFLED_SENDERS_HEADER] == "2"


def test_one_credential_counts_as_one_sender_however_many_reports(
        admitted: Callable[..., Flask], tmp_path: Path) -> None:
    """A party holding one credential (a stolen one, or the collector's own app install)
    cannot fill a batch: beyond MAX_REPORTS_PER_SENDER its reports are refused, and those
    it may send count once towards MIN_BATCH."""
    fake = AcceptingUpstream()
    http = admitted(fake).test_client()  # MIN_BATCH 5, MAX_REPORTS_PER_SENDER 1
    mine = credential()
    reply = http.post("/v1/reports", json={"reports": [envelope() for _ in range(10)]},
                      headers=mine).get_json()
    assert (reply["accepted"], reply["rejected"]) == (1, 9)
    assert {r["error"] for r in reply["results"][1:]} == {"sender-limit"}
    single = http.post("/v1/reports", json=envelope(), headers=mine)
    assert single.status_code == 409
    assert single.mimetype == PROBLEM
    assert single.get_json()["type"].endswith("/sender-limit")
    # The same sender may still report in another time bucket or campaign (other groups).
    assert http.post("/v1/reports", json=envelope(when=7200), headers=mine).status_code == 201
    for _ in range(3):
        http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert flush(http)["batches"] == 0 and fake.sent == []  # 4 senders < MIN_BATCH


def test_with_several_reports_per_sender_a_batch_still_needs_min_batch_senders(
        admitted: Callable[..., Flask]) -> None:
    fake = AcceptingUpstream()
    http = admitted(fake, MAX_REPORTS_PER_SENDER=10, MAX_BATCH=100).test_client()
    flood = http.post("/v1/reports", json={"reports": [envelope() for _ in range(10)]},
                      headers=credential()).get_json()
    assert flood["accepted"] == 10
    for _ in range(3):
        http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert flush(http)["batches"] == 0 and fake.sent == []  # 13 reports, 4 senders
    http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert flush(http)["batches"] == 1
    (sent,) = fake.sent
    assert len(json.loads(sent.body or b"")["reports"]) == 14
    assert (sent.headers[SHUFFLED_BATCH_HEADER], sent.headers[SHUFFLED_SENDERS_HEADER]) == \
        ("14", "5")


def test_a_large_admitted_group_splits_by_sender_and_each_batch_keeps_min_batch_senders(
        admitted: Callable[..., Flask]) -> None:
    fake = AcceptingUpstream()
    http = admitted(fake, MIN_BATCH=5, MAX_BATCH=20, MAX_REPORTS_PER_SENDER=2).test_client()
    for _ in range(23):
        http.post("/v1/reports", json={"reports": [envelope(), envelope()]},
                  headers=credential())
    assert flush(http)["batches"] == 3  # 46 reports: ceil(46 / 20) batches
    sizes = [(len(json.loads(s.body or b"")["reports"]), int(s.headers[SHUFFLED_SENDERS_HEADER]))
             for s in fake.sent]
    assert sorted(senders for _, senders in sizes) == [7, 8, 8]
    assert all(reports == 2 * senders for reports, senders in sizes)  # a sender stays whole


def test_distinct_credentials_forward_and_the_collector_states_the_vouched_count(
        collector: Flask, admitted: Callable[..., Flask], upstream: CollectorUpstream,
        rng: random.Random) -> None:
    """MIN_BATCH installs, each with its own credential, one of them sending two reports:
    the batch goes out with its sender count, the collector records it, and the estimate's
    central (ε, δ) is the bound at n = the senders (20), not the reports (21)."""
    config = create_campaign(collector)
    http = admitted(MIN_BATCH=20, MAX_BATCH=80, MAX_REPORTS_PER_SENDER=2).test_client()
    reports = client_reports(config, 21, rng)
    http.post("/v1/reports", json={"reports": reports[:2]}, headers=credential())
    for report in reports[2:]:
        assert http.post("/v1/reports", json=report, headers=credential()).status_code == 201
    result = flush(http)
    assert (result["batches"], result["accepted"], result["waiting"]) == (1, 21, 0)
    (sent,) = [s for s in upstream.sent if s.method == "POST"]
    assert sent.headers[SHUFFLED_SENDERS_HEADER] == "20"
    shuffling = estimate(collector)["shuffling"]
    assert (shuffling["smallest_batch"], shuffling["smallest_senders"]) == (21, 20)
    assert (shuffling["batches"], shuffling["vouched_batches"]) == (1, 1)
    assert shuffling["n_basis"] == "vouched-senders"
    assert shuffling["central"] == central_privacy(1.5, 20)
    assert NO_INJECTION not in shuffling["central"]["assumptions"]
    assert not any("assumes no injected" in note for note in shuffling["notes"])
    assert "20 distinct admitted senders" in shuffling["notes"][0]
    table = format_estimates(estimate(collector))
    assert "at n = 20 distinct senders vouched for by the shuffler's admission control" in table
    assert "injected" not in table
    with sqlite3.connect(collector.extensions["chorus.storage"].path) as conn:
        assert conn.execute("SELECT batches, reports, smallest, vouched_batches, "
                            "smallest_senders FROM shuffled_batches").fetchall() == [
            (1, 21, 21, 1, 20)]


def test_one_unvouched_batch_puts_the_caveat_back_on_the_window(
        collector: Flask, make_shuffler: Callable[..., Flask], admitted: Callable[..., Flask],
        rng: random.Random) -> None:
    """A window with a vouched batch and one from a shuffler without admission: n is the
    smaller of the two counts, and the figure says it assumes no injected reports."""
    config = create_campaign(collector, min_batch_size=1)
    vouched = admitted(MIN_BATCH=10, MAX_BATCH=40).test_client()
    for report in client_reports(config, 12, rng):
        vouched.post("/v1/reports", json=report, headers=credential())
    flush(vouched)
    assert estimate(collector)["shuffling"]["n_basis"] == "vouched-senders"
    open_door = make_shuffler(DATABASE=str(Path(collector.extensions["chorus.storage"].path)
                                           .with_name("other-pool.db")),
                              MIN_BATCH=10, MAX_BATCH=40).test_client()
    open_door.post("/v1/reports", json={"reports": client_reports(config, 30, rng)})
    flush(open_door)
    shuffling = estimate(collector)["shuffling"]
    assert (shuffling["batches"], shuffling["vouched_batches"]) == (2, 1)
    assert shuffling["n_basis"] == "reports-assuming-no-injection"
    assert shuffling["central"]["n"] == 12
    assert shuffling["central"]["assumptions"][0] == NO_INJECTION
    assert "1 of 2 batches" in shuffling["notes"][0]


def test_the_collector_fills_an_open_shuffler_and_the_figure_says_what_it_assumes(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        rng: random.Random) -> None:
    """Without admission the attack works (the shuffler cannot tell): 19 reports of the
    collector's own and one install's make a batch of 20. The collector's estimate must then
    not pass off the amplified ε as protecting that install: it says the figure assumes no
    injected reports."""
    config = create_campaign(collector)
    http = make_shuffler(MIN_BATCH=20, MAX_BATCH=40).test_client()
    http.post("/v1/reports", json={"reports": client_reports(config, 19, rng)})  # injected
    http.post("/v1/reports", json=client_reports(config, 1, rng)[0])  # the victim
    assert flush(http)["batches"] == 1
    (sent,) = [s for s in upstream.sent if s.method == "POST"]
    assert SHUFFLED_SENDERS_HEADER not in sent.headers  # nobody vouches for a count
    body = estimate(collector)
    shuffling = body["shuffling"]
    assert shuffling["n_basis"] == "reports-assuming-no-injection"
    assert shuffling["central"]["assumptions"][0] == NO_INJECTION
    assert shuffling["notes"][0].startswith(NO_INJECTION)
    # The CLI's table (chorus estimates) says it too, under the figure.
    table = format_estimates(body).splitlines()
    assert table[1].startswith("  shuffled: 20 reports in 1 batch; central ε = ")
    assert table[1].endswith("at n = 20 reports")
    assert table[2].startswith("  warning: this central (ε, δ) assumes no injected reports")


def test_no_sender_id_or_credential_reaches_the_collector_or_the_pool(
        admitted: Callable[..., Flask], tmp_path: Path) -> None:
    fake = AcceptingUpstream()
    http = admitted(fake).test_client()
    tokens = [mint_admission_credential(ADMISSION) for _ in range(5)]
    ids = [token.split(".")[1] for token in tokens]
    for token in tokens:
        reply = http.post("/v1/reports", json={"reports": [envelope(), envelope(when=7200)]},
                          headers={"Authorization": f"Bearer {token}"})
        assert reply.get_json()["accepted"] == 2
    rows = pool_rows(tmp_path)
    with sqlite3.connect(tmp_path / "pool.db") as conn:
        tags = conn.execute("SELECT time, sender FROM pool").fetchall()
    # One sender, one tag per group; the same sender's tags in two groups are unrelated.
    assert len({tag for _, tag in tags}) == 10
    assert all(tag not in sender for _, tag in tags for sender in ids)
    assert flush(http)["batches"] == 2
    for sent in fake.sent:
        assert sent.headers == {"Content-Type": "application/json",
                                "Authorization": f"Bearer {KEY}", SHUFFLED_BATCH_HEADER: "5",
                                SHUFFLED_SENDERS_HEADER: "5", "User-Agent": "chorus-shuffler"}
        body = (sent.body or b"").decode()
        assert set(json.loads(body)["reports"][0]) == {"report_id", "digest", "time", "payload"}
        for secret in [*tokens, *ids, *(tag for _, tag in tags), ADMISSION]:
            assert secret not in body and secret not in json.dumps(sent.headers)
    assert len(rows) == 10 and pool_rows(tmp_path) == []
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("pool.db*") if p.is_file())
    for marker in [*tokens, *ids]:
        assert marker.encode() not in stored
    assert ADMISSION not in json.dumps(http.application.config["CHORUS_SHUFFLER"])
    assert ADMISSION not in repr(http.application.extensions["chorus.shuffler.admission"])


def test_the_collector_checks_the_senders_header(collector: Flask, rng: random.Random) -> None:
    config = create_campaign(collector)
    http = collector.test_client()
    for declared in ("0", "4", "abc", "-1", ""):
        reply = http.post("/v1/reports", json={"reports": client_reports(config, 3, rng)},
                          headers={SHUFFLED_BATCH_HEADER: "3", SHUFFLED_SENDERS_HEADER: declared,
                                   **KEY_HEADERS})
        assert reply.status_code == 400, declared
        assert reply.mimetype == PROBLEM
        assert reply.get_json()["type"].endswith("/invalid-shuffled-batch")
    # Without the shuffler key neither header counts: anyone could claim a vouched count.
    reply = http.post("/v1/reports", json={"reports": client_reports(config, 3, rng)},
                      headers={SHUFFLED_BATCH_HEADER: "3", SHUFFLED_SENDERS_HEADER: "3"})
    assert reply.status_code == 200 and SHUFFLED_SENDERS_HEADER not in reply.headers
    assert "shuffling" not in estimate(collector)
    recorded = http.post("/v1/reports", json={"reports": client_reports(config, 3, rng)},
                         headers={SHUFFLED_BATCH_HEADER: "3", SHUFFLED_SENDERS_HEADER: "2",
                                  **KEY_HEADERS})
    assert recorded.headers[SHUFFLED_SENDERS_HEADER] == "2"
    assert estimate(collector)["shuffling"]["smallest_senders"] == 2


def test_a_retried_vouched_batch_counts_a_lower_bound_of_its_new_senders(
        make_app: Callable[..., Flask], rng: random.Random) -> None:
    """Of a batch of 6 reports from 4 senders, 2 were stored before: the other 4 have at
    least 4 − 2 = 2 senders, whoever sent which. Both storages (--backend postgresql)."""
    app = make_app(SHUFFLER_KEY=KEY)
    config = create_campaign(app)
    reports = client_reports(config, 6, rng)
    http = app.test_client()
    assert http.post("/v1/reports", json={"reports": reports[:2]}).status_code == 200
    reply = http.post("/v1/reports", json={"reports": reports},
                      headers={SHUFFLED_BATCH_HEADER: "6", SHUFFLED_SENDERS_HEADER: "4",
                               **KEY_HEADERS})
    assert (reply.get_json()["accepted"], reply.get_json()["duplicate"]) == (4, 2)
    shuffling = estimate(app)["shuffling"]
    assert (shuffling["reports_shuffled"], shuffling["smallest_senders"]) == (4, 2)
    assert shuffling["central"] == central_privacy(1.5, 2)
    again = http.post("/v1/reports", json={"reports": reports},
                      headers={SHUFFLED_BATCH_HEADER: "6", SHUFFLED_SENDERS_HEADER: "4",
                               **KEY_HEADERS})
    assert again.get_json()["duplicate"] == 6
    assert estimate(app)["shuffling"]["batches"] == 1  # a full retry hid nobody again


def test_real_clients_pass_their_credential_as_the_ingest_key(
        collector: Flask, admitted: Callable[..., Flask], upstream: CollectorUpstream,
        clock: FakeClock) -> None:
    """The client library needs no change: the app hands it the credential as ingest_key,
    which it sends as the bearer token of every upload. Without one it keeps its report
    (a 401 is not the report's fault) instead of dropping it."""
    from chorus_client import Client
    from helpers.support import FlaskBridge

    config = create_campaign(collector, privacy={"budget": 1.5})
    shuffler = admitted(MIN_BATCH=20, MAX_BATCH=40)
    transport = FlaskBridge(shuffler, "http://shuffler.test")
    values = config["domain"]["values"] if isinstance(config["domain"], dict) else \
        config["domain"]
    for i in range(20):
        install = Client("http://shuffler.test", ephemeral=True, transport=transport,
                         campaigns={"survey": config}, send_delay=0.0, clock=clock,
                         ingest_key=mint_admission_credential(ADMISSION))
        assert install.report("survey", values[i % len(values)]) == "queued"
        assert install.close().accepted == 1
    stranger = Client("http://shuffler.test", ephemeral=True, transport=transport,
                      campaigns={"survey": config}, send_delay=0.0, clock=clock)
    stranger.report("survey", values[0])
    assert stranger.flush().pending == 1  # refused with 401, kept
    assert stranger.close(timeout=1).accepted == 0
    result = flush(shuffler.test_client())
    assert (result["accepted"], result["waiting"]) == (20, 0)
    shuffling = estimate(collector)["shuffling"]
    assert (shuffling["n_basis"], shuffling["smallest_senders"]) == ("vouched-senders", 20)
    assert shuffling["central"] == central_privacy(1.5, 20)


# -- migrations -----------------------------------------------------------------------------------


def test_an_old_pool_migrates_and_its_reports_go_out_unvouched(
        admitted: Callable[..., Flask], tmp_path: Path) -> None:
    """A pool written before admission: its rows get no sender and are forwarded as before
    (MIN_BATCH reports, no sender count); admitted reports form groups of their own."""
    database = sqlite_utils.Database(str(tmp_path / "pool.db"))
    pool_migrations.apply(database, stop_before="m002_admitted_senders")
    old = [envelope() for _ in range(5)]
    database.table("pool").insert_all([{"digest": r["digest"], "report_id": r["report_id"],
                                  "time": r["time"], "payload": "1", "batch": None}
                                 for r in old])
    database.close()
    fake = AcceptingUpstream()
    http = admitted(fake).test_client()
    with sqlite3.connect(tmp_path / "pool.db") as conn:
        assert conn.execute("SELECT count(*), count(sender) FROM pool").fetchone() == (5, 0)
        names = [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")]
        assert names == ["m001_pool", "m002_admitted_senders", "m003_held"]
    for _ in range(4):
        http.post("/v1/reports", json={"reports": [envelope()]}, headers=credential())
    assert flush(http)["batches"] == 1  # the old group of 5; the 4 admitted senders wait
    (sent,) = fake.sent
    assert sorted(r["report_id"] for r in json.loads(sent.body or b"")["reports"]) == \
        sorted(r["report_id"] for r in old)
    assert SHUFFLED_SENDERS_HEADER not in sent.headers
    assert len(pool_rows(tmp_path)) == 4


def test_an_old_collector_database_migrates_and_its_batches_count_as_unvouched(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "old.db"
    database = sqlite_utils.Database(str(path))
    migrations.apply(database, stop_before="m006_vouched_senders")
    database.close()
    app = create_app({"DATABASE": str(path), "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                     clock=clock)
    config = create_campaign(app)
    rng = random.Random(3)
    app.test_client().post("/v1/reports", json={"reports": client_reports(config, 30, rng)})
    with sqlite3.connect(path) as conn:  # a batch recorded by the previous version
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm006_vouched_senders'")
        conn.execute("ALTER TABLE shuffled_batches DROP COLUMN smallest_senders")
        conn.execute("ALTER TABLE shuffled_batches DROP COLUMN vouched_batches")
        conn.execute("INSERT INTO shuffled_batches VALUES (1, ?, 1, 30, 30)",
                     (config_time(config),))
    storage = open_storage(str(path))
    storage.migrate()
    assert storage.shuffled_totals(1, None, None) == (1, 30, 30, 0, None)
    shuffling = estimate(create_app({"DATABASE": str(path), "ADMIN_TOKEN": ADMIN,
                                     "ANALYST_TOKEN": ANALYST}, clock=clock))["shuffling"]
    assert shuffling["n_basis"] == "reports-assuming-no-injection"
    assert shuffling["central"]["assumptions"][0] == NO_INJECTION


def config_time(config: dict[str, Any]) -> int:
    return campaign_from_config(config).time_bucket(NOW)


@pytest.mark.postgresql_only
def test_an_old_postgresql_database_migrates_and_keeps_its_batches_unvouched(
        postgres: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from chorus_collector.storage import postgres as storage_postgres

    url = postgres.new_schema()
    monkeypatch.setattr(storage_postgres, "MIGRATIONS", storage_postgres.MIGRATIONS[:2])
    old = open_storage(url)
    old.migrate()
    conn = old.connect()
    conn.execute("INSERT INTO campaigns (id, name, digest, config) VALUES (1, 'k', 'd', '{}')")
    conn.execute("INSERT INTO shuffled_batches VALUES (1, 3600, 2, 50, 20)")
    old.close()
    monkeypatch.undo()
    storage = open_storage(url)
    storage.migrate()
    assert storage.shuffled_totals(1, None, None) == (2, 50, 20, 0, None)
    conn = storage.connect()
    conn.execute("BEGIN")
    storage.record_shuffled_batch(conn, 1, {3600: 10}, {3600: 8})
    conn.execute("COMMIT")
    assert storage.shuffled_totals(1, None, None) == (3, 60, 10, 1, 8)


# -- admission settings and the backend's credentials ---------------------------------------------


def test_admission_settings_and_credentials() -> None:
    from chorus_shared.admission import AdmissionError, verify_admission_credential

    env = {"CHORUS_SHUFFLER_SHUFFLER_KEY": "k"}
    assert resolve_shuffler_settings(environ=env)["ADMISSION_SECRETS"] == ()
    blank = resolve_shuffler_settings(environ={**env, "CHORUS_SHUFFLER_ADMISSION_SECRETS": ""})
    assert blank["ADMISSION_SECRETS"] == ()  # Compose passes an unset variable as ""
    both = resolve_shuffler_settings(
        environ={**env, "CHORUS_SHUFFLER_ADMISSION_SECRETS": f"{ADMISSION},{ROTATED}"})
    assert both["ADMISSION_SECRETS"] == (ADMISSION, ROTATED)
    with pytest.raises(SettingsError, match="at least 32"):
        resolve_shuffler_settings({"ADMISSION_SECRETS": "short"}, environ=env)
    with pytest.raises(SettingsError, match="MAX_REPORTS_PER_SENDER"):
        resolve_shuffler_settings({"ADMISSION_SECRETS": ADMISSION, "MIN_BATCH": 10,
                                   "MAX_BATCH": 20, "MAX_REPORTS_PER_SENDER": 2}, environ=env)
    with pytest.raises(SettingsError, match="MAX_REPORTS_PER_SENDER must be at least 1"):
        resolve_shuffler_settings({"MAX_REPORTS_PER_SENDER": 0}, environ=env)
    token = mint_admission_credential(ADMISSION, lifetime=100, now=1000.0)
    assert token.startswith("v1.") and token.split(".")[2] == "1100"
    sender = token.split(".")[1]
    assert verify_admission_credential(token, [ELSEWHERE, ADMISSION], now=1099.0) == sender
    for keys, now, reason in (([ADMISSION], 1100.0, "expired"), ([ELSEWHERE], 1000.0, "invalid")):
        with pytest.raises(AdmissionError) as caught:
            verify_admission_credential(token, keys, now=now)
        assert caught.value.reason == reason
    renewed = mint_admission_credential(ADMISSION, sender=sender, now=2000.0)
    assert renewed.split(".")[1] == sender
    with pytest.raises(ValueError, match="at least 32"):
        mint_admission_credential("short")


def test_the_cli_mints_credentials_the_shuffler_admits(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from chorus_collector.cli import main as cli
    from chorus_shared.admission import verify_admission_credential

    env = {"CHORUS_SHUFFLER_ADMISSION_SECRETS": f"{ADMISSION},{ROTATED}"}
    result = CliRunner().invoke(cli, ["mint-credential", "--count", "3", "--days", "1"], env=env)
    assert result.exit_code == 0, result.output
    tokens = result.output.split()
    assert len(set(tokens)) == 3
    for token in tokens:
        verify_admission_credential(token, [ADMISSION])  # the first secret mints
    missing = CliRunner().invoke(cli, ["mint-credential"], env={})
    assert missing.exit_code == 2
    assert "CHORUS_SHUFFLER_ADMISSION_SECRETS" in missing.output


# -- crashes and an unreachable collector ---------------------------------------------------------


def test_a_crash_between_forward_and_delete_gives_duplicates_not_losses(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        tmp_path: Path, rng: random.Random) -> None:
    config = create_campaign(collector)
    http = make_shuffler().test_client()
    reports = client_reports(config, 7, rng)
    http.post("/v1/reports", json={"reports": reports})
    upstream.crash_after_delivery = True
    with pytest.raises(Crash):
        http.post("/v1/flush", headers=ADMIN_HEADERS)
    assert len(pool_rows(tmp_path)) == 7  # the collector committed; the pool still holds them
    assert all(row[4] is not None for row in pool_rows(tmp_path))  # claimed for that batch
    restarted = make_shuffler().test_client()  # a new process on the same pool
    result = flush(restarted)
    assert (result["batches"], result["accepted"], result["duplicate"]) == (1, 0, 7)
    assert pool_rows(tmp_path) == []
    first, second = upstream.batches()
    assert sorted(r["report_id"] for r in first) == sorted(r["report_id"] for r in second)
    body = estimate(collector)
    assert body["n"] == 7  # every report exactly once
    assert (body["shuffling"]["batches"], body["shuffling"]["smallest_batch"]) == (1, 7)


def test_an_unreachable_or_failing_collector_keeps_the_batch(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        tmp_path: Path, rng: random.Random) -> None:
    config = create_campaign(collector)
    http = make_shuffler().test_client()
    http.post("/v1/reports", json={"reports": client_reports(config, 5, rng)})
    upstream.down = True
    assert flush(http)["failed"] == 1
    assert len(pool_rows(tmp_path)) == 5
    upstream.down = False
    for status in (503, 429, 413):  # busy, down, or over the collector's request limits
        upstream.fail_with = status
        assert flush(http)["failed"] == 1
        assert len(pool_rows(tmp_path)) == 5
    upstream.fail_with = None
    result = flush(http)
    assert (result["batches"], result["accepted"]) == (1, 5)
    assert estimate(collector)["n"] == 5


def test_a_wrong_key_delivers_reports_as_direct_and_says_so(
        collector: Flask, make_shuffler: Callable[..., Flask], tmp_path: Path,
        rng: random.Random, caplog: pytest.LogCaptureFixture) -> None:
    config = create_campaign(collector)
    http = make_shuffler(SHUFFLER_KEY="wrong-key").test_client()
    http.post("/v1/reports", json={"reports": client_reports(config, 5, rng)})
    assert flush(http)["accepted"] == 5
    assert "did not record it as shuffled" in caplog.text
    body = estimate(collector)
    assert body["n"] == 5
    assert "shuffling" not in body  # no central claim for them


def test_reports_the_collector_rejects_are_dropped_from_the_pool(
        collector: Flask, make_shuffler: Callable[..., Flask], tmp_path: Path) -> None:
    http = make_shuffler().test_client()
    http.post("/v1/reports", json={"reports": [envelope() for _ in range(5)]})  # no campaign
    result = flush(http)
    assert (result["batches"], result["rejected"]) == (1, 5)
    assert pool_rows(tmp_path) == []


# -- bad input ------------------------------------------------------------------------------------


def test_bad_requests_get_problem_json(make_shuffler: Callable[..., Flask]) -> None:
    http = make_shuffler(MAX_BODY_BYTES=2000, MAX_REPORTS_PER_REQUEST=3).test_client()
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"data": b"{not json", "content_type": "application/json"}, 400, "malformed-json"),
        ({"data": b"[1, 2]", "content_type": "application/json"}, 400, "invalid-request"),
        ({"json": {"reports": []}}, 400, "invalid-request"),
        ({"json": {"reports": [], "extra": 1}}, 400, "invalid-request"),
        ({"json": {"reports": [envelope() for _ in range(4)]}}, 413, "too-many-reports"),
        ({"data": b'{"reports": [' + b" " * 3000 + b"]}", "content_type": "application/json"},
         413, "body-too-large"),
        ({"data": b"<xml/>", "content_type": "application/xml"}, 415, "unsupported-media-type"),
        ({"data": b'{"reports": [NaN]}', "content_type": "application/json"}, 400,
         "malformed-json"),
        ({"json": envelope(report_id="XYZ")}, 400, "invalid-report"),
    ]
    for kwargs, status, kind in cases:
        reply = http.post("/v1/reports", **kwargs)
        assert reply.status_code == status, (kwargs, reply.get_data())
        assert reply.mimetype == PROBLEM
        assert reply.get_json()["type"].endswith("/" + kind)
    assert http.get("/v1/reports").status_code == 405


def test_bad_reports_are_rejected_one_by_one(make_shuffler: Callable[..., Flask],
                                             tmp_path: Path) -> None:
    http = make_shuffler(MAX_PAYLOAD_BYTES=10, MAX_REPORTS_PER_REQUEST=100).test_client()
    good = envelope()
    bad = [
        envelope(report_id="AB" * 16), envelope(report_id="ab" * 15), envelope(digest="x" * 64),
        {**envelope(), "time": True}, {**envelope(), "time": -1}, {**envelope(), "time": 1.5},
        {**envelope(), "time": 2**40}, {**envelope(), "extra": 1},
        {k: v for k, v in envelope().items() if k != "payload"}, envelope(payload="x" * 20),
        "not an object", None, {**good, "payload": 2},  # the last: good's ID with other bytes
    ]
    reply = http.post("/v1/reports", json={"reports": [good, *bad]})
    assert reply.status_code == 200
    results = reply.get_json()["results"]
    assert results[0]["status"] == "accepted"
    assert [r["status"] for r in results[1:]] == ["rejected"] * len(bad)
    assert results[-1]["error"] == "report-conflict"
    assert all(r["error"] == "invalid-report" for r in results[1:-1])
    assert len(pool_rows(tmp_path)) == 1


def test_random_junk_never_gets_a_500(shuffler: FlaskClient) -> None:
    rng = random.Random(7)
    pieces = [b"{", b"}", b"[", b"]", b'"reports"', b":", b",", b"1", b'"x"', b"null",
              b'"report_id"', b'"time"', b"\\u0000", b"\xff", b"1e999", b"-", b" "]
    for _ in range(300):  # bounded
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        reply = shuffler.post("/v1/reports", data=body, content_type="application/json")
        assert reply.status_code < 500, body
        if reply.status_code >= 400:
            assert reply.mimetype == PROBLEM


# -- the campaign proxy and operations ------------------------------------------------------------


def test_campaigns_are_proxied_without_client_headers(
        collector: Flask, make_shuffler: Callable[..., Flask],
        upstream: CollectorUpstream) -> None:
    config = create_campaign(collector)
    http = make_shuffler().test_client()
    reply = http.get("/v1/campaigns/survey",
                     headers={"Cookie": "track=1", "User-Agent": "app/1 (device 7)",
                              "Authorization": "Bearer user", "X-Forwarded-For": "203.0.113.9"},
                     environ_base={"REMOTE_ADDR": "198.51.100.77"})
    assert reply.status_code == 200
    assert reply.get_json() == config
    assert reply.headers["ETag"] == f'"{config["digest"]}"'
    (sent,) = upstream.sent
    assert sent.headers == {"Accept": "application/json", "User-Agent": "chorus-shuffler"}
    assert sent.url == f"{BASE}/v1/campaigns/survey"
    assert http.get("/v1/campaigns/survey").get_json() == config
    assert len(upstream.sent) == 1  # served from the cache
    missing = http.get("/v1/campaigns/nope")
    assert missing.status_code == 404
    assert missing.mimetype == PROBLEM
    upstream.down = True
    down = http.get("/v1/campaigns/other")
    assert down.status_code == 502
    assert down.mimetype == PROBLEM


def test_the_proxy_passes_no_collector_cookie(make_shuffler: Callable[..., Flask]) -> None:
    class CookieCollector:
        def request(self, method: str, url: str, **kwargs: Any) -> UpstreamReply:
            return UpstreamReply(200, b"{}", {"Content-Type": "application/json",
                                              "Set-Cookie": "track=install-4711"})

    reply = make_shuffler(CookieCollector()).test_client().get("/v1/campaigns/x")
    assert reply.status_code == 200
    assert "Set-Cookie" not in reply.headers


def test_flush_needs_the_admin_token(shuffler: FlaskClient) -> None:
    assert shuffler.post("/v1/flush").status_code == 401
    wrong = shuffler.post("/v1/flush", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.mimetype == PROBLEM
    assert shuffler.post("/v1/flush", headers=ADMIN_HEADERS).status_code == 200
    assert shuffler.get("/healthz").get_json() == {"status": "ok",
                                                   "held": {"batches": 0, "reports": 0}}


def test_the_cli_flushes_once(collector: Flask, tmp_path: Path, rng: random.Random,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from chorus_collector.cli import main as cli
    from chorus_collector.shuffler import forward as shuffler_forward

    config = create_campaign(collector)
    create_shuffler_app(shuffler_config(tmp_path)).test_client().post(
        "/v1/reports", json={"reports": client_reports(config, 5, rng)})
    monkeypatch.setattr(shuffler_forward, "RequestsUpstream",
                        lambda: CollectorUpstream(collector))
    env = {f"CHORUS_SHUFFLER_{k}": str(v) for k, v in shuffler_config(tmp_path).items()}
    result = CliRunner().invoke(cli, ["shuffler", "--flush"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["accepted"] == 5
    refused = CliRunner().invoke(cli, ["shuffler", "--flush"],
                                 env={**env, "CHORUS_SHUFFLER_SHUFFLER_KEY": ""})
    assert refused.exit_code != 0
    assert "SHUFFLER_KEY" in refused.output


# -- settings -------------------------------------------------------------------------------------


def test_shuffler_settings_from_the_environment_and_their_checks() -> None:
    env = {"CHORUS_SHUFFLER_SHUFFLER_KEY": "k", "CHORUS_SHUFFLER_MIN_BATCH": "50",
           "CHORUS_SHUFFLER_MAX_BATCH": "100", "CHORUS_SHUFFLER_KEY": "for the collector",
           "CHORUS_ADMIN_TOKEN": "the collector's"}
    settings = resolve_shuffler_settings(environ=env)
    assert (settings["MIN_BATCH"], settings["MAX_BATCH"], settings["SHUFFLER_KEY"]) == \
        (50, 100, "k")
    with pytest.raises(SettingsError, match="did you mean 'MIN_BATCH'"):
        resolve_shuffler_settings(environ={**env, "CHORUS_SHUFFLER_MIN_BATHC": "3"})
    with pytest.raises(SettingsError, match="2 x MIN_BATCH"):
        resolve_shuffler_settings({"MAX_BATCH": 99}, environ=env)
    with pytest.raises(SettingsError, match="needs SHUFFLER_KEY"):
        resolve_shuffler_settings(environ={})
    with pytest.raises(SettingsError, match="FORWARD_INTERVAL"):
        resolve_shuffler_settings({"FORWARD_INTERVAL": 7200}, environ=env)
    with pytest.raises(SettingsError, match="must be an integer"):
        resolve_shuffler_settings({"MIN_BATCH": "many"}, environ=env)
    # The collector reads CHORUS_SHUFFLER_KEY and leaves the shuffler's own variables alone.
    collector = resolve_settings(environ=env)
    assert collector["SHUFFLER_KEY"] == "for the collector"


def test_every_shuffler_setting_is_documented_with_its_default() -> None:
    from chorus_collector.shuffler.settings import SHUFFLER_SETTINGS

    docs = (Path(__file__).resolve().parents[3] / "docs" / "shuffler.md").read_text()
    for setting in SHUFFLER_SETTINGS:
        row = next((line for line in docs.splitlines()
                    if line.startswith(f"| `CHORUS_SHUFFLER_{setting.name}` |")), None)
        assert row is not None, setting.name
        assert ("unset" if setting.default is None else str(setting.default)) in row


# -- over real HTTP -------------------------------------------------------------------------------


class ShufflerProcess:
    """``chorus shuffler`` as a child process on loopback."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
        env.update({f"CHORUS_SHUFFLER_{k}": v for k, v in settings.items()})
        env["CHORUS_SHUFFLER_BIND"] = f"127.0.0.1:{self.port}"
        script = Path(sys.executable).with_name("chorus")
        self.log = Path(settings["DATABASE"]).with_suffix(".log")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([str(script), "shuffler"], env=env,
                                            stdout=subprocess.DEVNULL, stderr=log,
                                            start_new_session=True)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the shuffler did not become healthy")

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        return self.process.returncode


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[CollectorProcess, ShufflerProcess]]:
    with CollectorProcess(tmp_path / "live.db", settings={
            "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST, "SHUFFLER_KEY": KEY,
            "WORKERS": "1", "THREADS": "4"}) as collector:
        shuffler = ShufflerProcess({"DATABASE": str(tmp_path / "live-pool.db"),
                                    "COLLECTOR_URL": collector.url, "SHUFFLER_KEY": KEY,
                                    "ADMIN_TOKEN": ADMIN, "MIN_BATCH": "4", "MAX_BATCH": "8",
                                    "FORWARD_INTERVAL": "1", "WORKERS": "2", "THREADS": "4"})
        try:
            shuffler.wait_healthy()
            yield collector, shuffler
        finally:
            assert shuffler.stop() == 0, shuffler.log.read_text()


@pytest.mark.slow
def test_over_real_http_the_background_thread_forwards_a_full_batch(
        live: tuple[CollectorProcess, ShufflerProcess], rng: random.Random) -> None:
    collector, shuffler = live
    created = requests.post(f"{collector.url}/v1/campaigns", json=spec_for("live"),
                            headers=ADMIN_HEADERS, timeout=10)
    assert created.status_code == 201
    config = requests.get(f"{shuffler.url}/v1/campaigns/live", timeout=10).json()
    assert config == created.json() | {"warnings": config["warnings"]}
    reports = client_reports(config, 4, rng, now=time.time())
    three = requests.post(f"{shuffler.url}/v1/reports", json={"reports": reports[:3]}, timeout=10)
    assert [r["status"] for r in three.json()["results"]] == ["accepted"] * 3
    time.sleep(1.5)  # a forwarding pass or more: 3 < MIN_BATCH, nothing may go
    early = requests.get(f"{collector.url}/v1/campaigns/live/estimates",
                         headers=ANALYST_HEADERS, timeout=10)
    assert early.status_code == 409  # no report at the collector yet
    requests.post(f"{shuffler.url}/v1/reports", json=reports[3], timeout=10)
    deadline = time.monotonic() + 20
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:  # bounded: the thread runs every second
        reply = requests.get(f"{collector.url}/v1/campaigns/live/estimates",
                             headers=ANALYST_HEADERS, timeout=10)
        if reply.status_code == 200:
            body = reply.json()
            break
        time.sleep(0.2)
    assert body.get("n") == 4, shuffler.log.read_text()
    assert body["shuffling"]["smallest_batch"] == 4
    assert body["shuffling"]["reports_direct"] == 0
    # The compose healthcheck of the shuffler passes against it.
    compose = yaml.safe_load((Path(__file__).resolve().parents[3] / "docker-compose.yml")
                             .read_text())
    check = compose["services"]["shuffler"]["healthcheck"]["test"]
    command = [sys.executable if c == "python" else
               c.replace("127.0.0.1:8001", f"127.0.0.1:{shuffler.port}") for c in check[1:]]
    assert subprocess.run(command, timeout=10).returncode == 0


def test_real_clients_through_the_shuffler(collector: Flask, make_shuffler: Callable[..., Flask],
                                           upstream: CollectorUpstream,
                                           clock: FakeClock) -> None:
    """The client library pointed at the shuffler: 60 installs with the config pinned, each
    reporting once; the collector receives batches of at least MIN_BATCH, and the estimate
    states the central bound of its smallest batch."""
    from chorus_client import Client
    from helpers.support import FlaskBridge

    config = create_campaign(collector, privacy={"budget": 1.5})  # one report per install
    shuffler = make_shuffler(MIN_BATCH=20, MAX_BATCH=40)
    transport = FlaskBridge(shuffler, "http://shuffler.test")
    values = config["domain"]["values"] if isinstance(config["domain"], dict) else \
        config["domain"]
    for i in range(60):
        install = Client("http://shuffler.test", ephemeral=True, transport=transport,
                         campaigns={"survey": config}, send_delay=0.0, clock=clock)
        assert install.report("survey", values[i % len(values)]) == "queued"
        assert install.close().accepted == 1
    assert all(s.method == "POST" for s in transport.sent)  # the pinned config: no fetch
    result = flush(shuffler.test_client())
    assert (result["accepted"], result["waiting"]) == (60, 0)
    assert all(len(batch) >= 20 for batch in upstream.batches())
    shuffling = estimate(collector)["shuffling"]
    assert shuffling["reports_shuffled"] == 60 and shuffling["reports_direct"] == 0
    assert shuffling["central"]["epsilon"] == \
        central_privacy(1.5, shuffling["smallest_batch"])["epsilon"]
    assert shuffling["central"]["assumptions"][0] == NO_INJECTION  # nobody vouched for n


@pytest.mark.slow
def test_over_real_http_admission_comes_from_the_environment(tmp_path: Path) -> None:
    shuffler = ShufflerProcess({"DATABASE": str(tmp_path / "admit-pool.db"),
                                "COLLECTOR_URL": f"http://127.0.0.1:{free_port()}",
                                "SHUFFLER_KEY": KEY, "ADMISSION_SECRETS": ADMISSION,
                                "FORWARD_INTERVAL": "0", "WORKERS": "1", "THREADS": "2"})
    try:
        shuffler.wait_healthy()
        refused = requests.post(f"{shuffler.url}/v1/reports", json={"reports": [envelope()]},
                                timeout=10)
        assert refused.status_code == 401
        assert refused.headers["Content-Type"] == PROBLEM
        assert refused.headers["WWW-Authenticate"] == 'Bearer realm="chorus-shuffler"'
        admitted = requests.post(f"{shuffler.url}/v1/reports", json={"reports": [envelope()]},
                                 headers=credential(), timeout=10)
        assert admitted.status_code == 200 and admitted.json()["accepted"] == 1
    finally:
        assert shuffler.stop() == 0, shuffler.log.read_text()
