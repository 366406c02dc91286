"""The aggregation job on a Dask cluster (two worker processes on 127.0.0.1) gives exactly the
statistics of the in-process fold and of the process-pool recomputation, from the database
or from a Parquet export, and its commit is the same compare-and-set as the in-process fold's.
"""

from __future__ import annotations

import json
import random
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.cli import main as cli
from chorus_collector.jobs import distributed
from chorus_collector.jobs.aggregate import Buckets, check_aggregates, recompute
from chorus_collector.jobs.distributed import (
    aggregate_parquet,
    cluster_recompute,
    fold_on_cluster,
    fold_with_cluster,
    recompute_on_cluster,
)
from chorus_collector.jobs.export import SIDECAR, export_parquet
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import SQLiteStorage, state_array
from helpers.support import ADMIN_HEADERS, FakeClock, make_report

SPECS: list[dict[str, Any]] = [
    {"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"]},
    {"name": "o", "mechanism": "olh", "epsilon": 2.0, "domain": [f"v{i}" for i in range(40)]},
    {"name": "r", "mechanism": "rappor", "epsilon": 3.0, "domain": {"kind": "strings"},
     "params": {"k": 16, "h": 2, "m": 4}},
    {"name": "d", "mechanism": "duchi", "epsilon": 1.0,
     "domain": {"kind": "numeric", "lo": 0, "hi": 100}},
    {"name": "v", "mechanism": "hm_md", "epsilon": 6.0, "domain": {"kind": "vector",
     "attributes": [{"name": "x", "lo": 0, "hi": 1}, {"name": "y", "lo": 0, "hi": 9}]}},
]
VALUES: dict[str, Callable[[random.Random], Any]] = {
    "k": lambda r: r.choice("abc"), "o": lambda r: f"v{r.randrange(40)}",
    "r": lambda r: f"s{r.randrange(6)}", "d": lambda r: 100 * r.random(),
    "v": lambda r: [r.random(), 9 * r.random()]}
PER_BUCKET = 40
TOTAL = len(SPECS) * 3 * PER_BUCKET
# These compare twin SQLite files; test_distributed_backends.py runs on either backend.
pytestmark = pytest.mark.sqlite_only


# With its dashboard off, the scheduler still serves /health and /metrics, on port 8787 by
# default: a second cluster (another xdist worker, another checkout's tests) would find it
# taken and warn, an error here. A free port on loopback instead.
_SCHEDULER_HTTP = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """Two single-threaded worker processes: tasks are pickled and open storage themselves."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, scheduler_kwargs=_SCHEDULER_HTTP) as cluster, \
            Client(cluster, set_as_default=False) as dask_client:  # as the CLI's is
        yield dask_client


@dataclass
class Reports:
    db: Path
    http: FlaskClient
    configs: dict[str, dict[str, Any]]
    clock: FakeClock
    rng: random.Random

    def send(self, name: str, count: int, hours_ago: int = 0) -> None:
        config = self.configs[name]
        reports = [make_report(config, VALUES[name](self.rng), self.rng,
                               now=self.clock.now - 3600 * hours_ago) for _ in range(count)]
        assert self.http.post("/v1/reports", json={"reports": reports}).get_json()[
            "accepted"] == count


@pytest.fixture
def appended(make_app: Callable[..., Flask], clock: FakeClock, db_path: Path) -> Reports:
    """Every campaign's reports over three hourly buckets, appended and not yet folded."""
    http = make_app().test_client()
    configs = {spec["name"]: http.post("/v1/campaigns", json={**spec, "min_batch_size": 1},
                                       headers=ADMIN_HEADERS).get_json() for spec in SPECS}
    reports = Reports(db_path, http, configs, clock, random.Random(14))
    for hour in range(3):
        for spec in SPECS:
            reports.send(spec["name"], PER_BUCKET, hours_ago=hour)
    assert SQLiteStorage(str(db_path)).fold_status().unfolded == TOTAL
    return reports


def _copy(source: Path, target: Path) -> Path:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return target


def _folded(db: Path) -> dict[str, list[tuple[int, int, np.ndarray]]]:
    storage = SQLiteStorage(str(db))
    out = {}
    for spec in SPECS:
        stored = storage.get_campaign(spec["name"])
        assert stored is not None
        out[spec["name"]] = [(time, n, state_array(blob)) for time, n, blob
                             in storage.folded_statistics(stored.id).buckets]
    return out


def _assert_same_folds(a: dict[str, list[tuple[int, int, np.ndarray]]],
                       b: dict[str, list[tuple[int, int, np.ndarray]]]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert [(t, n) for t, n, _ in a[name]] == [(t, n) for t, n, _ in b[name]], name
        assert all(np.array_equal(x, y) for (_, _, x), (_, _, y) in zip(a[name], b[name],
                                                                         strict=True)), name


def _assert_same_buckets(a: Buckets, b: Buckets) -> None:
    assert sorted(a) == sorted(b)
    for time in a:
        assert a[time][0] == b[time][0], time
        assert a[time][1].dtype == b[time][1].dtype == np.int64
        assert np.array_equal(a[time][1], b[time][1]), time


def test_a_fold_on_the_cluster_leaves_the_statistics_of_the_in_process_fold(
        appended: Reports, tmp_path: Path, client: Client) -> None:
    twin = _copy(appended.db, tmp_path / "twin.db")
    assert fold(SQLiteStorage(str(appended.db)), limit=97) == TOTAL
    storage = SQLiteStorage(str(twin))
    # Ranges of 23 seqs: tasks cut across campaigns and buckets.
    assert fold_with_cluster(storage, client, task_reports=23) == TOTAL
    assert storage.fold_status().unfolded == 0
    original = SQLiteStorage(str(appended.db))
    assert storage.fold_status().watermark == original.fold_status().watermark
    _assert_same_folds(_folded(appended.db), _folded(twin))
    assert storage.claim_fold("next", 1.0, 1.0)  # the lease was given back
    assert fold_with_cluster(storage, client) == 0  # nothing left: a no-op


def test_a_fold_that_commits_first_makes_the_cluster_fold_discard_its_work(
        appended: Reports, tmp_path: Path, client: Client) -> None:
    twin = _copy(appended.db, tmp_path / "twin.db")
    fold(SQLiteStorage(str(twin)))
    storage = SQLiteStorage(str(appended.db))

    def race(step: str) -> None:
        if step == "map":  # the tasks are planned: a server's folder commits meanwhile
            assert fold(SQLiteStorage(str(appended.db)), limit=50) == TOTAL

    assert fold_on_cluster(storage, client, task_reports=50, step=race) is None
    assert fold_with_cluster(storage, client) == 0
    _assert_same_folds(_folded(appended.db), _folded(twin))  # every report counted once


def test_reports_appended_during_a_cluster_fold_wait_for_the_next_one(
        appended: Reports, client: Client) -> None:
    storage = SQLiteStorage(str(appended.db))

    def ingest(step: str) -> None:
        if step == "map":
            appended.send("k", 7)
            appended.send("d", 5, hours_ago=1)

    assert fold_on_cluster(storage, client, task_reports=40, step=ingest) == TOTAL
    assert storage.fold_status().unfolded == 12
    assert fold_on_cluster(storage, client) == 12
    for spec in SPECS:
        checks = check_aggregates(storage, spec["name"], workers=1)
        assert all(c.matches for c in checks), spec["name"]
        assert sum(c.stored_n for c in checks) == 3 * PER_BUCKET + {"k": 7, "d": 5}.get(
            spec["name"], 0)


def test_the_cluster_recomputes_exactly_what_the_process_pool_does(
        appended: Reports, client: Client) -> None:
    storage = SQLiteStorage(str(appended.db))
    fold(storage)
    for spec in SPECS:
        pool = recompute(storage, spec["name"], workers=2, chunk=33)
        assert sum(n for n, _ in pool.values()) == 3 * PER_BUCKET
        _assert_same_buckets(recompute_on_cluster(storage, spec["name"], client,
                                                  task_reports=64), pool)
        checks = check_aggregates(storage, spec["name"],
                                  recompute_with=cluster_recompute(client, task_reports=64))
        assert len(checks) == 3 and all(c.matches for c in checks), spec["name"]
    with pytest.raises(KeyError):
        recompute_on_cluster(storage, "nope", client)


def test_a_parquet_export_aggregates_to_the_recomputed_statistics(
        appended: Reports, tmp_path: Path, client: Client) -> None:
    storage = SQLiteStorage(str(appended.db))
    fold(storage)
    appended.send("k", 9)  # past the watermark: in no folded statistic, so not exported
    for spec in SPECS:
        name = spec["name"]
        export = export_parquet(storage, name, tmp_path / name, rows_per_file=50,
                                row_group=20)
        assert export.reports == 3 * PER_BUCKET and len(export.files) == 3
        table = pq.read_table(tmp_path / name)  # the sidecar is skipped (leading "_")
        seqs = table.column("seq").to_pylist()
        assert seqs == sorted(seqs) and len(seqs) == 3 * PER_BUCKET
        assert max(seqs) <= storage.fold_status().watermark
        sidecar = json.loads((tmp_path / name / SIDECAR).read_text())
        assert sidecar["watermark"] == storage.fold_status().watermark
        assert sidecar["campaign"]["digest"] == appended.configs[name]["digest"]
        pool = recompute(storage, name, workers=1)
        _assert_same_buckets(aggregate_parquet(tmp_path / name, client)[1], pool)
        _assert_same_buckets(aggregate_parquet(tmp_path / name)[1], pool)  # no cluster
    with pytest.raises(FileExistsError):
        export_parquet(storage, "k", tmp_path / "k")


def test_the_cli_folds_checks_exports_and_aggregates_on_a_cluster(
        appended: Reports, tmp_path: Path, client: Client) -> None:
    runner = CliRunner()
    address = client.scheduler.address
    db = ["--database", str(appended.db)]
    folded = runner.invoke(cli, ["aggregate", *db, "--scheduler", address])
    assert folded.exit_code == 0, folded.output
    assert f"folded {TOTAL} reports; 0 waiting" in folded.output
    checked = runner.invoke(cli, ["check-aggregates", "r", *db, "--scheduler", address])
    assert checked.exit_code == 0 and "match the raw reports" in checked.output, checked.output
    out = tmp_path / "export"
    exported = runner.invoke(cli, ["export", "o", "--parquet", str(out), *db])
    assert exported.exit_code == 0 and f"exported {3 * PER_BUCKET} reports" in exported.output
    again = runner.invoke(cli, ["export", "o", "--parquet", str(out), *db])
    assert again.exit_code == 1 and "not empty" in again.output
    summed = runner.invoke(cli, ["aggregate", "--from-parquet", str(out), "--scheduler",
                                 address])
    assert summed.exit_code == 0, summed.output
    lines = [json.loads(line) for line in summed.output.splitlines()]
    from_cli = {line["time"]: (line["n"], np.array(line["state"], dtype=np.int64))
                for line in lines}
    assert {line["campaign"] for line in lines} == {"o"}
    _assert_same_buckets(from_cli, recompute(SQLiteStorage(str(appended.db)), "o", workers=1))
    missing = runner.invoke(cli, ["aggregate", "--from-parquet", str(tmp_path)])
    assert missing.exit_code == 1 and "not a finished Chorus export" in missing.output


def test_without_the_dask_extra_the_commands_say_what_to_install(
        appended: Reports, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    runner = CliRunner()
    db = ["--database", str(appended.db)]
    for args in (["aggregate", *db, "--scheduler", "tcp://127.0.0.1:8786"],
                 ["check-aggregates", "k", *db, "--scheduler", "tcp://127.0.0.1:8786"],
                 ["export", "k", "--parquet", str(tmp_path / "out"), *db]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, result.output
        assert "pip install 'chorus-ldp[dask]'" in result.output
        assert "Traceback" not in result.output
    assert SQLiteStorage(str(appended.db)).fold_status().unfolded == TOTAL  # nothing was folded


def test_an_unreachable_scheduler_is_named(appended: Reports,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a port on loopback that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(distributed, "CONNECT_TIMEOUT", 0.5)
    address = f"tcp://127.0.0.1:{port}"
    result = CliRunner().invoke(cli, ["aggregate", "--database", str(appended.db),
                                      "--scheduler", address])
    assert result.exit_code == 1
    assert f"cannot reach the Dask scheduler at {address}" in result.output


def test_the_collector_imports_neither_dask_nor_pyarrow_until_a_job_needs_them() -> None:
    # As installed with the collector extra alone: without pandas. (sqlite-utils imports
    # pandas, and pandas pyarrow, wherever pandas is installed, as the analysis extra does:
    # docs/analysts.md says to keep that extra off the collector's hosts.)
    code = ("import sys; sys.modules['pandas'] = None; "
            "import chorus_collector.cli, chorus_collector.jobs.distributed, "
            "chorus_collector.jobs.export; print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert "chorus_collector.jobs.distributed" in loaded
    assert {m.split(".")[0] for m in loaded} & {"dask", "distributed", "pyarrow"} == set()
