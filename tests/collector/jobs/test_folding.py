"""Ingest only appends; a resumable job folds the reports into the statistics.

The job is checked by fault injection at every step (an exception, then a real kill -9 of a
process mid-fold), by racing folders, and by comparing what it leaves with a clean run's
statistics. Estimates are complete at every moment: folded statistics plus the unfolded tail.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlite_utils
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.cli import main as cli
from chorus_collector.estimators import estimator_for
from chorus_collector.jobs.aggregate import check_aggregates
from chorus_collector.jobs.folding import FOLDER_NICENESS, BackgroundFolder, fold, fold_once
from chorus_collector.jobs.tail import estimate_inputs
from chorus_collector.storage import SQLiteStorage, migrations, open_storage
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    FakeClock,
    make_report,
)

STEPS = ["read", "map", "begin", "merge", "watermark", "commit"]
SPECS: list[dict[str, Any]] = [
    {"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"],
     "min_batch_size": 1},
    {"name": "o", "mechanism": "olh", "epsilon": 2.0, "domain": [f"v{i}" for i in range(30)],
     "min_batch_size": 1},
]
VALUES: dict[str, Callable[[random.Random], str]] = {
    "k": lambda r: r.choice("abc"), "o": lambda r: f"v{r.randrange(30)}"}


def _fill(http: FlaskClient, clock: FakeClock, seed: int = 7, per_bucket: int = 40) -> int:
    """Reports for both campaigns over three hourly buckets; returns how many."""
    rng = random.Random(seed)
    total = 0
    for spec in SPECS:
        config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
        for hour in range(3):
            reports = [make_report(config, VALUES[spec["name"]](rng), rng,
                                   now=clock.now - 3600 * hour) for _ in range(per_bucket)]
            assert http.post("/v1/reports", json={"reports": reports}).get_json()[
                "accepted"] == per_bucket
            total += per_bucket
    return total


def _statistics(database: str) -> list[tuple[int, int, int, bytes]]:
    rows = open_storage(database).connect().execute(
        "SELECT campaign_id, time, n, state FROM aggregates ORDER BY campaign_id, time")
    return [(c, t, n, bytes(state)) for c, t, n, state in rows]


@pytest.fixture
def filled(make_app: Callable[..., Flask], clock: FakeClock, database: str) -> str:
    _fill(make_app().test_client(), clock)
    return database


@pytest.fixture
def clean_statistics(tmp_path: Path, clock: FakeClock,
                     request: pytest.FixtureRequest) -> list[tuple[int, int, int, bytes]]:
    """What an uninterrupted fold of the same reports leaves (same seeds, another database
    on the same backend)."""
    from chorus_collector import create_app

    database = request.getfixturevalue("database")
    other = (request.getfixturevalue("postgres").new_schema()
             if database.startswith("postgresql:") else str(tmp_path / "clean.db"))
    app = create_app({"DATABASE": other, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                     clock=clock)
    _fill(app.test_client(), clock)
    assert fold(open_storage(other)) == 240
    return _statistics(other)


def test_ingest_appends_and_computes_no_statistics(
        make_app: Callable[..., Flask], clock: FakeClock, database: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_map(*args: object) -> None:
        raise AssertionError("ingest mapped reports to statistics")

    for spec in SPECS:
        monkeypatch.setattr(estimator_for(spec["mechanism"]), "map", no_map)
    app = make_app()
    total = _fill(app.test_client(), clock)
    assert _statistics(database) == []
    assert open_storage(database).fold_status().unfolded == total


def test_estimates_are_complete_before_during_and_after_folding(
        make_app: Callable[..., Flask], clock: FakeClock, database: str) -> None:
    http = make_app().test_client()
    _fill(http, clock)
    storage = open_storage(database)

    def estimate() -> dict[str, Any]:
        reply = http.get("/v1/campaigns/o/estimates", headers=ANALYST_HEADERS)
        assert reply.status_code == 200, reply.get_json()
        body: dict[str, Any] = reply.get_json()
        return body

    before = estimate()
    assert before["n"] == 120 and before["freshness"] == {"folded_at": None,
                                                          "unfolded_reports": 120}
    fold_once(storage, limit=150, clock=lambda: 1234.5)  # all of "k", part of "o"
    during = estimate()
    assert during["freshness"]["folded_at"] == 1234.5
    assert 0 < during["freshness"]["unfolded_reports"] < 120
    fold(storage)
    after = estimate()
    assert after["freshness"]["unfolded_reports"] == 0
    for body in (during, after):
        assert body["n"] == 120 and body["rows"] == before["rows"]  # the same numbers


@pytest.mark.parametrize("step", STEPS)
def test_a_fold_that_fails_at_any_step_changes_nothing_and_the_rerun_is_exact(
        filled: str, clean_statistics: list[Any], step: str) -> None:
    storage = open_storage(filled)

    def crash(at: str) -> None:
        if at == step:
            raise RuntimeError(f"crash at {at}")

    rounds = 0
    while storage.fold_status().unfolded:  # each round crashes at `step`, then resumes
        rounds += 1
        before = (_statistics(filled), storage.fold_status().watermark)
        with pytest.raises(RuntimeError):
            fold_once(storage, limit=50, step=crash)
        if step != "commit":  # before the commit: nothing at all changed
            assert (_statistics(filled), storage.fold_status().watermark) == before
            fold_once(storage, limit=50)
    assert rounds == 5  # 240 reports, 50 at a time
    assert _statistics(filled) == clean_statistics
    assert all(c.matches for name in ("k", "o") for c in check_aggregates(storage, name, 1))


def _fold_and_die(db: str, step: str) -> None:
    def die(at: str) -> None:
        if at == step:
            os._exit(9)  # no cleanup, no rollback: as a kill -9

    fold_once(open_storage(db), limit=50, step=die)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["map", "merge", "watermark", "commit"])
def test_a_process_killed_mid_fold_leaves_consistent_statistics(
        filled: str, clean_statistics: list[Any], step: str) -> None:
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_fold_and_die, args=(str(filled), step))
    child.start()
    child.join(60)
    assert child.exitcode == 9
    storage = open_storage(filled)
    assert storage.fold_status().watermark == (50 if step == "commit" else 0)
    assert fold(storage) == (190 if step == "commit" else 240)
    assert _statistics(filled) == clean_statistics


def test_racing_folders_never_count_a_report_twice(filled: str,
                                                   clean_statistics: list[Any]) -> None:
    storage = open_storage(filled)
    chunk = storage.unfolded(30)
    assert chunk.reports == 30
    assert sum(group.reports for group in chunk.groups) == 30
    assert fold_once(storage, limit=30) == 30
    # A fold that read the same reports loses the race: its commit changes nothing.
    assert storage.commit_fold(chunk.watermark, chunk.through, {(1, chunk.groups[0].time): (
        30, np.ones(3, dtype=np.int64))}, now=0.0, moves=chunk.moves) is False
    results: list[int] = []

    def worker() -> None:
        results.append(fold(open_storage(filled), limit=7))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(results) == 210
    assert _statistics(filled) == clean_statistics


def test_the_lease_keeps_a_second_folder_idle(filled: str) -> None:
    storage = open_storage(filled)
    assert storage.claim_fold("first", now=100.0, lease=60.0)
    assert not storage.claim_fold("second", now=130.0, lease=60.0)
    assert BackgroundFolder(storage, 1, clock=lambda: 130.0).run_once() == 0
    assert storage.claim_fold("first", now=150.0, lease=60.0)  # the holder renews
    assert storage.claim_fold("second", now=211.0, lease=60.0)  # an expired lease is taken
    storage.release_fold("second")
    assert BackgroundFolder(storage, 1, clock=lambda: 212.0).run_once() == 240


def test_the_background_folder_catches_up_and_stops(filled: str) -> None:
    storage = open_storage(filled)
    folder = BackgroundFolder(storage, 0.05)
    folder.start()
    try:
        deadline = time.monotonic() + 30
        while storage.fold_status().unfolded and time.monotonic() < deadline:
            time.sleep(0.05)
        assert storage.fold_status().unfolded == 0
        native_id = folder._thread.native_id if folder._thread else None
        assert native_id is not None
        # Background work yields the cores to requests (a thread's own nice value on Linux).
        assert os.getpriority(os.PRIO_PROCESS, native_id) >= FOLDER_NICENESS
    finally:
        folder.stop()
    assert folder._thread is not None and not folder._thread.is_alive()


def test_aggregate_command_folds_on_demand(filled: str) -> None:
    result = CliRunner().invoke(cli, ["aggregate", "--database", filled])
    assert result.exit_code == 0, result.output
    assert "folded 240 reports; 0 waiting" in result.output
    again = CliRunner().invoke(cli, ["aggregate", "--database", filled])
    assert "folded 0 reports; 0 waiting" in again.output


@pytest.mark.sqlite_only
def test_a_database_of_the_previous_schema_keeps_its_statistics(
        make_app: Callable[..., Flask], clock: FakeClock, tmp_path: Path) -> None:
    """Before m004 the statistics were updated at ingest: after the upgrade the watermark
    stands past every old report (none is counted twice), and payloads that gc had
    scrubbed are retired with their count."""
    db = tmp_path / "old.db"
    database = sqlite_utils.Database(str(db))
    migrations.apply(database, stop_before="m004_append_only_reports")
    state = np.array([2, 1, 0], dtype="<i8").tobytes()
    database.execute("INSERT INTO campaigns (id, name, digest, config) "
                     "SELECT 1, 'k', ?, ?", [*_krr_campaign()])
    for number, payload in enumerate(["0", "0", ""]):
        database.execute("INSERT INTO reports VALUES (1, ?, 3600, ?)",
                         [bytes([number]) * 16, payload])
    database.execute("INSERT INTO aggregates VALUES (1, 3600, 3, ?)", [state])
    database.conn.commit()
    database.close()
    storage = SQLiteStorage(str(db))
    storage.migrate()
    status = storage.fold_status()
    assert (status.watermark, status.unfolded) == (2, 0)
    statistics = storage.folded_statistics(1)
    assert statistics.retired == {3600: 1}
    stored = storage.get_campaign("k")
    assert stored is not None
    inputs = estimate_inputs(storage, stored, None, None)
    assert inputs.n == 3 and inputs.state.tolist() == [2, 1, 0]
    check = check_aggregates(storage, "k", workers=1)
    assert [(c.stored_n, c.recomputed_n, c.retired, c.matches) for c in check] == [
        (3, 2, 1, True)]


def _krr_campaign() -> tuple[str, str]:
    from chorus_shared.campaign import campaign_from_spec, canonical_json

    campaign = campaign_from_spec({"name": "k", "mechanism": "krr", "epsilon": 1.0,
                                   "domain": ["a", "b", "c"]})
    return campaign.digest, canonical_json(campaign.config).decode()
