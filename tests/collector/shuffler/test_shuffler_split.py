"""The shuffler against a collector that answers 413 (issue 33, found under item 7): a batch
over the collector's body limit is split in halves of at least MIN_BATCH until it fits, a batch
too small to split is held (never dropped, logged once, shown in /healthz, retried after a
back-off), and groups are claimed in batches under MAX_BATCH_BYTES so that the split is the
exception. Every report reaches the collector exactly once, on either backend, a crash in the
middle of a split included; no batch under MIN_BATCH ever reaches it.

The collector is real throughout (the in-process app on the selected backend, or `chorus
serve`), with a small MAX_BODY_BYTES; only the last test runs both servers as processes.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.server.process import CollectorProcess
from chorus_collector.settings import SettingsError, resolve_settings
from chorus_collector.shuffler.app import create_shuffler_app
from chorus_collector.shuffler.forward import (
    HOLD_BACKOFF,
    SHUFFLED_SENDERS_HEADER,
    Forwarder,
    UpstreamReply,
)
from chorus_collector.shuffler.pool import PooledReport, ShufflerPool, batch_body
from chorus_collector.shuffler.settings import resolve_shuffler_settings
from chorus_shared.admission import mint_admission_credential
from helpers.shuffler import ShufflerProcess
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, FakeClock, make_report
from helpers.support import campaign_spec as spec_for

KEY = "shuffler-split-key"
ADMISSION = "7a1c" * 16
BASE = "http://collector.test"
# About 135 bytes a k-RR report: 1200 bytes take 8 of them, so a batch of 6 (MIN_BATCH below)
# fits and one of 12 does not.
LIMIT = 1200
MIN_BATCH = 6


class Crash(BaseException):
    """The shuffler process dying (not an Exception: nothing in the code may swallow it)."""


@dataclass
class Forwarded:
    status: int
    report_ids: list[str]
    body_bytes: int
    headers: dict[str, str]


@dataclass
class CollectorUpstream:
    """The shuffler's way to a real collector app, in process: records what each request
    carried and what the collector answered; can die after a delivery."""

    app: Flask
    forwarded: list[Forwarded] = field(default_factory=list)
    crash_after_deliveries: int | None = None  # the collector commits, then the shuffler dies

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> UpstreamReply:
        reply = self.app.test_client().open(url.removeprefix(BASE), method=method, data=body,
                                            headers=dict(headers))
        reports = json.loads(body or b"")["reports"]
        self.forwarded.append(Forwarded(reply.status_code, [r["report_id"] for r in reports],
                                        len(body or b""), dict(headers)))
        if reply.status_code == 200 and self.crash_after_deliveries is not None:
            self.crash_after_deliveries -= 1
            if self.crash_after_deliveries == 0:
                raise Crash
        return UpstreamReply(reply.status_code, reply.get_data(), dict(reply.headers))

    def delivered(self) -> list[list[str]]:
        return [f.report_ids for f in self.forwarded if f.status == 200]

    def statuses(self) -> list[tuple[int, int]]:
        """(status, reports) of every request, in order."""
        return [(f.status, len(f.report_ids)) for f in self.forwarded]


@pytest.fixture
def collector(make_app: Callable[..., Flask]) -> Flask:
    """A real collector on the selected backend whose body limit takes 8 reports."""
    return make_app(SHUFFLER_KEY=KEY, MAX_BODY_BYTES=LIMIT)


@pytest.fixture
def upstream(collector: Flask) -> CollectorUpstream:
    return CollectorUpstream(collector)


@pytest.fixture
def make_shuffler(tmp_path: Path, upstream: CollectorUpstream,
                  clock: FakeClock) -> Callable[..., Flask]:
    def factory(**overrides: Any) -> Flask:
        config = {"DATABASE": str(tmp_path / "pool.db"), "SHUFFLER_KEY": KEY,
                  "ADMIN_TOKEN": ADMIN, "COLLECTOR_URL": BASE, "MIN_BATCH": MIN_BATCH,
                  "MAX_BATCH": 100, "FORWARD_INTERVAL": 0, **overrides}
        return create_shuffler_app(config, upstream=upstream, wall_clock=clock)

    return factory


def create_campaign(collector: Flask, name: str = "survey") -> dict[str, Any]:
    reply = collector.test_client().post("/v1/campaigns", json=spec_for(name),
                                         headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config: dict[str, Any] = reply.get_json()
    return config


def post_reports(shuffler: FlaskClient, config: dict[str, Any], count: int,
                 rng: random.Random, **headers: str) -> list[str]:
    reports = [make_report(config, rng.choice("abcd"), rng) for _ in range(count)]
    reply = shuffler.post("/v1/reports", json={"reports": reports}, headers=headers)
    assert reply.status_code == 200 and reply.get_json()["accepted"] == count, reply.get_json()
    return [r["report_id"] for r in reports]


def flush(shuffler: FlaskClient) -> dict[str, Any]:
    reply = shuffler.post("/v1/flush", headers=ADMIN_HEADERS)
    assert reply.status_code == 200, reply.get_data()
    body: dict[str, Any] = reply.get_json()
    return body


def estimate(collector: Flask, name: str = "survey") -> dict[str, Any]:
    reply = collector.test_client().get(f"/v1/campaigns/{name}/estimates",
                                        headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def assert_exactly_once(upstream: CollectorUpstream, sent: list[str]) -> None:
    """Every report the shuffler admitted was taken by the collector, none twice (a repeat
    the collector answered as a duplicate is not taken twice: its estimate counts it once)."""
    taken = [report_id for batch in upstream.delivered() for report_id in batch]
    assert sorted(set(taken)) == sorted(sent)


# -- splitting ------------------------------------------------------------------------------------


def test_a_batch_refused_as_too_large_splits_in_halves_until_it_fits(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        tmp_path: Path, rng: random.Random) -> None:
    """Regression: a 413 kept the batch and resent it whole on every pass, for ever."""
    config = create_campaign(collector)
    http = make_shuffler().test_client()
    sent = post_reports(http, config, 48, rng)
    result = flush(http)
    assert (result["batches"], result["accepted"], result["split"]) == (8, 48, 1 + 2 + 4)
    assert (result["failed"], result["held"], result["claimed"]) == (0, 0, 0)
    # 48 reports are refused, then 2 × 24, 4 × 12; 8 × 6 fit. Nothing below MIN_BATCH is sent.
    assert sorted(upstream.statuses()) == sorted(
        [(413, 48)] + [(413, 24)] * 2 + [(413, 12)] * 4 + [(200, 6)] * 8)
    assert all(f.body_bytes <= LIMIT for f in upstream.forwarded if f.status == 200)
    assert_exactly_once(upstream, sent)
    body = estimate(collector)
    assert body["n"] == 48
    shuffling = body["shuffling"]
    assert (shuffling["reports_shuffled"], shuffling["batches"]) == (48, 8)
    assert shuffling["smallest_batch"] == MIN_BATCH  # the collector's own record of batches


def test_with_admission_each_half_keeps_min_batch_senders_and_each_sender_whole(
        make_app: Callable[..., Flask], tmp_path: Path, clock: FakeClock,
        rng: random.Random) -> None:
    """Admitted batches split by sender, as claims do: a sender's reports go whole into one
    half, and each half is vouched for with at least MIN_BATCH senders."""
    collector = make_app(SHUFFLER_KEY=KEY, MAX_BODY_BYTES=1500)  # 8 reports fit, 16 do not
    upstream = CollectorUpstream(collector)
    config = create_campaign(collector)
    shuffler = create_shuffler_app(
        {"DATABASE": str(tmp_path / "pool.db"), "SHUFFLER_KEY": KEY, "ADMIN_TOKEN": ADMIN,
         "COLLECTOR_URL": BASE, "MIN_BATCH": 4, "MAX_BATCH": 16, "FORWARD_INTERVAL": 0,
         "ADMISSION_SECRETS": ADMISSION, "MAX_REPORTS_PER_SENDER": 2},
        upstream=upstream, wall_clock=clock)
    http = shuffler.test_client()
    by_sender = {}
    for sender in range(8):
        credential = mint_admission_credential(ADMISSION, now=clock())
        by_sender[sender] = set(post_reports(http, config, 2, rng,
                                             Authorization=f"Bearer {credential}"))
    result = flush(http)
    assert (result["batches"], result["accepted"], result["split"]) == (2, 16, 1)
    assert upstream.statuses() == [(413, 16), (200, 8), (200, 8)]
    for forwarded in upstream.forwarded[1:]:
        assert forwarded.headers[SHUFFLED_SENDERS_HEADER] == "4"
        ids = set(forwarded.report_ids)
        assert all(ids >= reports or not ids & reports for reports in by_sender.values())
    shuffling = estimate(collector)["shuffling"]
    assert (shuffling["batches"], shuffling["smallest_senders"]) == (2, 4)
    assert shuffling["n_basis"] == "vouched-senders"


def test_a_crash_in_the_middle_of_a_split_loses_nothing_and_counts_nothing_twice(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        tmp_path: Path, rng: random.Random) -> None:
    """The shuffler dies after the collector committed the first quarter of a split batch and
    before the pool forgot it: a restarted shuffler sends that quarter again (duplicates) and
    the rest (split the same way), and the collector counts each report once."""
    config = create_campaign(collector)
    http = make_shuffler().test_client()
    sent = post_reports(http, config, 24, rng)
    upstream.crash_after_deliveries = 1
    with pytest.raises(Crash):
        http.post("/v1/flush", headers=ADMIN_HEADERS)
    assert upstream.statuses() == [(413, 24), (413, 12), (200, 6)]
    upstream.crash_after_deliveries = None
    restarted = make_shuffler().test_client()  # a new process on the same pool
    assert restarted.get("/healthz").get_json()["held"] == {"batches": 0, "reports": 0}
    result = flush(restarted)
    assert (result["accepted"], result["duplicate"], result["claimed"]) == (18, 6, 0)
    assert all(size >= MIN_BATCH for _, size in upstream.statuses())
    assert_exactly_once(upstream, sent)
    body = estimate(collector)
    assert body["n"] == 24
    # The repeated quarter added no report, so the collector did not count it as a batch.
    assert (body["shuffling"]["batches"], body["shuffling"]["smallest_batch"]) == (4, 6)


# -- a batch too small to split -------------------------------------------------------------------


def test_a_batch_too_small_to_split_is_held_logged_once_and_backs_off(
        collector: Flask, make_app: Callable[..., Flask], make_shuffler: Callable[..., Flask],
        upstream: CollectorUpstream, clock: FakeClock, rng: random.Random,
        caplog: pytest.LogCaptureFixture) -> None:
    config = create_campaign(collector)
    app = make_shuffler()
    http = app.test_client()
    forwarder: Forwarder = app.extensions["chorus.shuffler.forwarder"]
    sent = post_reports(http, config, 11, rng)  # ~1.5 KB; halves would have 5 < MIN_BATCH
    # The background thread's pass (no operator behind it).
    report = forwarder.flush(wait=False)
    assert (report.failed, report.held, report.split, report.batches) == (1, 1, 0, 0)
    assert upstream.statuses() == [(413, 11)]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    for setting in ("CHORUS_MAX_BODY_BYTES", "CHORUS_SHUFFLER_MIN_BATCH",
                    "CHORUS_SHUFFLER_MAX_BATCH", "MIN_BATCH = 6", "11 reports"):
        assert setting in errors[0]
    health = http.get("/healthz")
    assert health.status_code == 200  # alive: a restart would not help
    assert health.get_json() == {"status": "degraded", "held": {"batches": 1, "reports": 11}}

    # Backing off: no pass sends it again until a minute has passed, then two, then four...
    first, most = HOLD_BACKOFF
    assert (first, most) == (60.0, 3600.0)
    for delay in (first, 2 * first, 4 * first):
        tries = len(upstream.forwarded)
        clock.now += delay - 1
        assert forwarder.flush(wait=False).held == 1
        assert len(upstream.forwarded) == tries
        clock.now += 1
        assert forwarder.flush(wait=False).failed == 1
        assert upstream.statuses()[tries:] == [(413, 11)]
    # An operator's flush tries it at once; still logged only once.
    assert flush(http)["held"] == 1
    assert len(upstream.forwarded) == 5
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1
    assert flush(http)["held_reports"] == 11  # kept, never dropped

    # The operator raises the collector's limit: the next flush delivers the batch whole.
    upstream.app = make_app(SHUFFLER_KEY=KEY)
    result = flush(http)
    assert (result["batches"], result["accepted"], result["held"], result["claimed"]) == \
        (1, 11, 0, 0)
    assert http.get("/healthz").get_json() == {"status": "ok",
                                               "held": {"batches": 0, "reports": 0}}
    assert_exactly_once(upstream, sent)
    body = estimate(collector)
    assert (body["n"], body["shuffling"]["smallest_batch"]) == (11, 11)


def test_the_back_off_is_capped_and_survives_a_restart(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        clock: FakeClock, rng: random.Random) -> None:
    config = create_campaign(collector)
    app = make_shuffler()
    post_reports(app.test_client(), config, 11, rng)
    forwarder: Forwarder = app.extensions["chorus.shuffler.forwarder"]
    for _ in range(10):  # 1, 2, 4 ... 512 minutes: past the cap of an hour
        forwarder.flush(wait=False)
        clock.now += 10 * 3600
    tries = len(upstream.forwarded)
    assert tries == 10
    # The next try is recorded in the pool, in wall-clock time: a new process waits for it.
    restarted: Forwarder = make_shuffler().extensions["chorus.shuffler.forwarder"]
    forwarder.flush(wait=False)  # the eleventh refusal: next try in an hour
    assert len(upstream.forwarded) == tries + 1
    clock.now += HOLD_BACKOFF[1] - 1
    assert restarted.flush(wait=False).held == 1
    assert len(upstream.forwarded) == tries + 1
    clock.now += 1
    assert restarted.flush(wait=False).failed == 1
    assert len(upstream.forwarded) == tries + 2


# -- batches sized by bytes up front --------------------------------------------------------------


def test_groups_are_claimed_under_max_batch_bytes_so_nothing_is_refused(
        collector: Flask, make_shuffler: Callable[..., Flask], upstream: CollectorUpstream,
        rng: random.Random) -> None:
    config = create_campaign(collector)
    http = make_shuffler(MAX_BATCH_BYTES=LIMIT).test_client()
    sent = post_reports(http, config, 48, rng)
    result = flush(http)
    assert (result["accepted"], result["split"], result["failed"]) == (48, 0, 0)
    assert all(status == 200 for status, _ in upstream.statuses())
    assert all(len(f.report_ids) >= MIN_BATCH and f.body_bytes <= LIMIT
               for f in upstream.forwarded)
    assert_exactly_once(upstream, sent)
    assert estimate(collector)["n"] == 48


def test_the_floor_wins_over_max_batch_bytes(
        make_app: Callable[..., Flask], make_shuffler: Callable[..., Flask],
        upstream: CollectorUpstream, rng: random.Random) -> None:
    """A group whose smallest batches would still be over MAX_BATCH_BYTES goes as one batch of
    at least MIN_BATCH (a collector with a larger limit takes it); never smaller ones."""
    upstream.app = make_app(SHUFFLER_KEY=KEY)
    config = create_campaign(upstream.app)
    http = make_shuffler(MAX_BATCH_BYTES=500).test_client()
    post_reports(http, config, 11, rng)
    assert flush(http)["accepted"] == 11
    assert upstream.statuses() == [(200, 11)]


def test_the_claimed_size_is_the_forwarded_body_to_the_byte(tmp_path: Path) -> None:
    """Payloads of every length, non-ASCII ones included: a limit of the group's exact body
    size claims one batch, one byte less claims two."""
    digest, when = "e" * 64, 1_767_225_600
    payloads = ['"' + "é" * i + '"' for i in range(6)] + [str(10 ** i) for i in range(6)]
    reports = [PooledReport(secrets.token_hex(16), digest, when, p) for p in payloads]
    exact = len(batch_body(reports))
    for limit, batches in ((exact, 1), (exact - 1, 2)):
        pool = ShufflerPool(str(tmp_path / f"pool-{limit}.db"))
        pool.migrate()
        pool.add(reports)
        claimed = pool.claim(min_batch=6, max_batch=100, max_bytes=limit)
        assert len(claimed) == batches
        for batch in claimed:
            assert len(batch_body(pool.batch(batch))) <= limit
        pool.close()


def test_max_batch_bytes_defaults_to_the_collectors_body_limit() -> None:
    env = {"CHORUS_SHUFFLER_SHUFFLER_KEY": "k"}
    assert resolve_shuffler_settings(environ=env)["MAX_BATCH_BYTES"] == \
        resolve_settings(environ={})["MAX_BODY_BYTES"] == 4 * 1024 * 1024
    with pytest.raises(SettingsError, match="MAX_BATCH_BYTES must be at least 1"):
        resolve_shuffler_settings({"MAX_BATCH_BYTES": 0}, environ=env)


# -- over real HTTP -------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_shuffler_and_collector_split_hold_and_deliver_exactly_once(
        database: str, tmp_path: Path, rng: random.Random) -> None:
    """`chorus shuffler` in front of `chorus serve` with a 1,200-byte body limit: a group of 48
    reaches the collector in batches of 6, a group of 11 is held and reported, and goes through
    whole once the collector's limit is raised. The collector counts every report once."""
    settings = {"ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST, "SHUFFLER_KEY": KEY,
                "WORKERS": "1", "THREADS": "2"}
    collector = CollectorProcess(database, settings={**settings, "MAX_BODY_BYTES": str(LIMIT)},
                                 log_path=tmp_path / "collector.log").start()
    try:
        api = requests.Session()
        configs = {}
        for name in ("split", "held"):
            created = api.post(f"{collector.url}/v1/campaigns", json=spec_for(name),
                               headers=ADMIN_HEADERS, timeout=10)
            assert created.status_code == 201, created.text
            configs[name] = created.json()
        with ShufflerProcess(tmp_path / "pool.db", {
                "COLLECTOR_URL": collector.url, "SHUFFLER_KEY": KEY, "ADMIN_TOKEN": ADMIN,
                "MIN_BATCH": str(MIN_BATCH), "MAX_BATCH": "100", "FORWARD_INTERVAL": "0",
                "WORKERS": "2", "THREADS": "2"}) as shuffler:
            now = time.time()
            for name, count in (("split", 48), ("held", 11)):
                reports = [make_report(configs[name], rng.choice("abcd"), rng, now=now)
                           for _ in range(count)]
                posted = api.post(f"{shuffler.url}/v1/reports", json={"reports": reports},
                                  timeout=10)
                assert posted.json()["accepted"] == count, posted.text

            def flush_pass() -> dict[str, Any]:
                reply = api.post(f"{shuffler.url}/v1/flush", headers=ADMIN_HEADERS, timeout=60)
                assert reply.status_code == 200, reply.text
                body: dict[str, Any] = reply.json()
                return body

            def estimate_of(name: str) -> dict[str, Any]:
                reply = api.get(f"{collector.url}/v1/campaigns/{name}/estimates",
                                headers=ANALYST_HEADERS, timeout=10)
                assert reply.status_code in (200, 409), reply.text
                body: dict[str, Any] = reply.json()
                return body

            first = flush_pass()
            assert (first["accepted"], first["split"], first["held"]) == (48, 7, 1)
            assert first["held_reports"] == 11
            split = estimate_of("split")
            assert split["n"] == 48
            assert (split["shuffling"]["batches"], split["shuffling"]["smallest_batch"]) == \
                (8, MIN_BATCH)  # no batch under MIN_BATCH reached the collector
            nothing = estimate_of("held")  # 409: no report of it at the collector yet
            assert nothing["detail"].startswith("0 accepted reports"), nothing
            health = api.get(f"{shuffler.url}/healthz", timeout=10).json()
            assert health == {"status": "degraded", "held": {"batches": 1, "reports": 11}}
            assert flush_pass()["held"] == 1  # tried again, refused again, logged once
            assert shuffler.log().count("cannot be split") == 1, shuffler.log()
            assert "CHORUS_MAX_BODY_BYTES" in shuffler.log()

            # The operator raises the collector's limit and flushes.
            collector.stop()
            collector = CollectorProcess(database, settings=settings, port=collector.port,
                                         log_path=tmp_path / "collector.log").start()
            last = flush_pass()
            assert (last["accepted"], last["held"], last["claimed"], last["waiting"]) == \
                (11, 0, 0, 0)
            held = estimate_of("held")
            assert (held["n"], held["shuffling"]["smallest_batch"]) == (11, 11)
            assert estimate_of("split")["n"] == 48
            health = api.get(f"{shuffler.url}/healthz", timeout=10).json()
            assert health == {"status": "ok", "held": {"batches": 0, "reports": 0}}
    finally:
        collector.stop()
