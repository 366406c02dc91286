"""A report ID is stored once per campaign, whatever time it comes with, on every backend and
whichever replica receives it (docs/reliability.md, "Replay-proof ingest").

PostgreSQL once keyed an ID with its time (its daily partitions' key had to hold the time):
the same ID sent again with the time of the bucket before was stored and counted twice. These
probes send exactly that, one request after the other, inside one batch, and from two
replicas at the same moment; they run on SQLite, and on PostgreSQL with ``--backend
postgresql`` (a real server). The upgrade of a database that holds such copies is tested
below them.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from flask import Flask

from chorus_collector import create_app
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import open_storage
from chorus_collector.storage.postgres import MIGRATIONS
from chorus_shared.campaign import campaign_from_spec, canonical_json
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    campaign_spec,
    make_report,
    query,
)

PRECISION = 3600
TRIALS = 25  # races per test: each one a fresh ID; bounded


def _replica(database: str, clock: FakeClock) -> Flask:
    return create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                      clock=clock)


def _campaign(app: Flask) -> dict[str, Any]:
    reply = app.test_client().post("/v1/campaigns", headers=ADMIN_HEADERS,
                                   json=campaign_spec("ids", time_precision=PRECISION))
    assert reply.status_code in (200, 201), reply.get_json()
    body: dict[str, Any] = reply.get_json()
    return body


def _copies(database: str, report_id: str) -> int:
    rows = query(database, "SELECT count(*) FROM reports WHERE report_id = ?",
                 bytes.fromhex(report_id))
    return int(rows[0][0])


def _earlier(report: dict[str, Any]) -> dict[str, Any]:
    """The same report ID with the time bucket before (a valid time, another partition's
    day when the bucket is the first of a day)."""
    return {**report, "time": report["time"] - PRECISION}


def test_an_id_sent_again_with_another_time_is_refused_and_stored_once(
        database: str, clock: FakeClock) -> None:
    http = _replica(database, clock).test_client()
    config = _campaign(http.application)
    rng = random.Random(1)
    report = make_report(config, "a", rng)
    assert http.post("/v1/reports", json=report).status_code == 201
    again = http.post("/v1/reports", json=_earlier(report))
    assert again.status_code == 409
    assert again.get_json()["type"].endswith("/report-conflict")
    # In a batch, beside new reports: the copy is refused, the others accepted.
    others = [make_report(config, "b", rng) for _ in range(5)]
    batch = http.post("/v1/reports", json={"reports": [*others, _earlier(report)]}).get_json()
    assert (batch["accepted"], batch["rejected"]) == (5, 1)
    assert batch["results"][-1]["error"] == "report-conflict"
    # And the byte-for-byte retry is still a duplicate, not a conflict.
    assert http.post("/v1/reports", json=report).status_code == 200
    assert _copies(database, report["report_id"]) == 1
    fold(open_storage(database))
    estimate = http.get("/v1/campaigns/ids/estimates", headers=ANALYST_HEADERS).get_json()
    assert estimate["n"] == 6


def _race(sends: list[tuple[Flask, Any]]) -> list[Any]:
    """Post each body to its replica from its own thread, all released at once."""
    start = threading.Barrier(len(sends))
    answers: list[Any] = [None] * len(sends)

    def send(index: int, replica: Flask, body: Any) -> None:
        client = replica.test_client()
        start.wait(30)
        answers[index] = client.post("/v1/reports", json=body)

    threads = [threading.Thread(target=send, args=(i, replica, body))
               for i, (replica, body) in enumerate(sends)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(answer is not None for answer in answers)
    return answers


def test_two_replicas_racing_one_id_with_two_times_store_it_once(
        database: str, clock: FakeClock) -> None:
    replicas = [_replica(database, clock) for _ in range(2)]
    config = _campaign(replicas[0])
    rng = random.Random(2)
    for _ in range(TRIALS):
        report = make_report(config, "a", rng)
        answers = _race([(replicas[0], report), (replicas[1], _earlier(report))])
        assert sorted(a.status_code for a in answers) == [201, 409], \
            [a.get_json() for a in answers]
        assert _copies(database, report["report_id"]) == 1


def test_two_replicas_racing_batches_of_the_same_ids_with_other_times_store_each_once(
        database: str, clock: FakeClock) -> None:
    replicas = [_replica(database, clock) for _ in range(2)]
    config = _campaign(replicas[0])
    rng = random.Random(3)
    sent = 0
    for _ in range(5):
        batch = [make_report(config, rng.choice("abcd"), rng) for _ in range(40)]
        moved = [_earlier(report) for report in batch]
        answers = [a.get_json() for a in _race([(replicas[0], {"reports": batch}),
                                                 (replicas[1], {"reports": moved})])]
        # Each ID accepted by exactly one replica, refused as a conflict by the other.
        for first, second in zip(answers[0]["results"], answers[1]["results"], strict=True):
            assert sorted([first["status"], second["status"]]) == ["accepted", "rejected"]
            assert "report-conflict" in (first.get("error"), second.get("error"))
        sent += len(batch)
    assert query(database, "SELECT count(*), count(DISTINCT report_id) FROM reports") == [
        (sent, sent)]


# -- the upgrade of a PostgreSQL database that holds an ID twice ----------------------------------

DAY = 86_400


def _old_database(url: str) -> None:
    """A database as version p003 left it: reports partitioned by day, keyed with the time."""
    from chorus_collector.storage import postgres

    statements = ["CREATE TABLE chorus_migrations (name TEXT PRIMARY KEY, "
                  "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"]
    for name, steps in postgres.MIGRATIONS[:3]:
        statements += [*steps, f"INSERT INTO chorus_migrations (name) VALUES ('{name}')"]
    day = int(NOW) // DAY
    for d in (day - 1, day):
        statements.append(f"CREATE TABLE reports_d{d} PARTITION OF reports "
                          f"FOR VALUES FROM ({d * DAY}) TO ({(d + 1) * DAY})")
    for statement in statements:
        query(url, statement)


@pytest.mark.postgresql_only
def test_an_upgrade_keeps_the_first_copy_of_an_id_and_counts_folded_copies_as_retired(
        postgres: Any) -> None:
    url = postgres.new_schema()
    _old_database(url)
    campaign = campaign_from_spec(campaign_spec("ids", time_precision=PRECISION))
    query(url, "INSERT INTO campaigns (name, digest, config) VALUES (?, ?, ?)",
          campaign.name, campaign.digest, canonical_json(campaign.config).decode())
    folded, unfolded, single = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16
    t = int(NOW)  # the first bucket of a day: the bucket before is in the day before
    rows = [(folded, t), (folded, t - PRECISION),  # seqs 1, 2: folded, counted twice
            (single, t),  # seq 3: folded
            (unfolded, t), (unfolded, t - PRECISION)]  # seqs 4, 5: not folded yet
    for report_id, time in rows:
        query(url, "INSERT INTO reports (campaign_id, report_id, time, payload) "
                   "VALUES (1, ?, ?, '0')", report_id, time)
    query(url, "UPDATE fold_state SET seq = 3")
    assert query(url, "SELECT count(*) FROM reports") == [(5,)]

    storage = open_storage(url)
    storage.migrate()
    assert query(url, "SELECT seq, report_id, time FROM reports ORDER BY seq") == [
        (1, folded, t), (3, single, t), (4, unfolded, t)]
    # The folded second copy fed the statistics: counted as retired, so a recount agrees.
    assert storage.folded_statistics(1).retired == {t - PRECISION: 1}
    assert query(url, "SELECT name FROM chorus_migrations ORDER BY name")[-1] == (
        MIGRATIONS[-1][0],)
    storage.close()

    # Upgraded: the ID refused with another time, new reports appended after the old seqs.
    clock = FakeClock(NOW)
    http = _replica(url, clock).test_client()
    config = http.get("/v1/campaigns/ids").get_json()
    copy = {**make_report(config, "a", random.Random(4)), "report_id": folded.hex(),
            "time": t - PRECISION}
    assert http.post("/v1/reports", json=copy).status_code == 409
    assert http.post("/v1/reports", json=make_report(config, "a", random.Random(5))
                     ).status_code == 201
    [(seq,)] = query(url, "SELECT max(seq) FROM reports")
    assert seq > 5  # after every old seq (a refused insert may have taken one)
