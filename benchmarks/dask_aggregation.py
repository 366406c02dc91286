"""The aggregation job on a Dask LocalCluster against the process pool, in the same run:
``python benchmarks/dask_aggregation.py [--quick] [--reports N] [--mechanism krr|olh|rappor]``.

One collector database holds N simulated reports of one campaign
(``chorus_collector.design.simulate``,
24 hourly buckets), appended as ingest appends them and not folded. Then, with W workers
(default: one per core):

* recompute, the headline (best of ``--repeat`` runs each, interleaved):
  ``aggregate.recompute`` on a pool of W processes (the driver streams the payloads out of
  SQLite to them) against ``distributed.recompute_on_cluster`` on a LocalCluster of W
  single-threaded worker processes on 127.0.0.1 (each task reads its own seq range). The
  ratio Dask / pool is the target: at most 1.10;
* fold: ``folding.fold`` in this process (one core, the collector's own path) against
  ``distributed.fold_with_cluster`` (``chorus aggregate --scheduler``) on a copy of the
  database.

Both sides are checked to give identical statistics. The cluster's start (and its workers'
first import of the estimators) is timed apart: a deployment keeps its cluster running.
Writes ``bench-results/dask_aggregation.json``; every loop is bounded by its report count.
(Not named distributed.py: a script's folder comes first on sys.path, and that name would
hide the ``distributed`` package.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import secrets
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from chorus_collector.cli.progress import staged

SPECS: dict[str, dict[str, Any]] = {
    "krr": {"mechanism": "krr", "epsilon": 2.0, "domain": [f"c{i}" for i in range(16)]},
    "olh": {"mechanism": "olh", "epsilon": 1.0, "domain": [f"c{i}" for i in range(1024)]},
    "rappor": {"mechanism": "rappor", "epsilon": 4.0, "domain": {"kind": "strings"},
               "params": {"k": 128, "h": 2, "m": 32}},
}
BUILD_CHUNK = 100_000


def build(path: Path, name: str, reports: int) -> None:
    """A database holding ``reports`` unfolded reports of campaign ``name``."""
    from chorus_collector.design.simulate import simulate
    from chorus_collector.storage import SQLiteStorage, StoredReport
    from chorus_shared import campaign_from_spec

    storage = SQLiteStorage(str(path), synchronous="OFF")  # a benchmark's scratch file
    storage.migrate()
    campaign = campaign_from_spec({"name": name, **SPECS[name]}, warn=False)
    stored, _ = storage.insert_campaign(campaign)
    rng = np.random.default_rng(5)
    hour0 = campaign.time_bucket(time.time()) - 24 * 3600
    for start in range(0, reports, BUILD_CHUNK):
        size = min(BUILD_CHUNK, reports - start)
        if name == "rappor":
            values: Any = np.array([f"https://site-{i}.example/" for i in
                                    rng.zipf(1.5, size) % 100], dtype=object)
        else:
            values = np.minimum(rng.zipf(1.3, size) - 1, len(SPECS[name]["domain"]) - 1)
        payloads = simulate(campaign.mechanism, values, rng)
        hours = rng.integers(0, 24, size=size).tolist()
        with storage.write() as conn:
            storage.insert_reports(conn, stored.id, [
                StoredReport(secrets.token_bytes(16), hour0 + 3600 * h, json.dumps(p))
                for p, h in zip(payloads, hours, strict=True)])
    storage.close()


def _same(a: dict[Any, tuple[int, np.ndarray]], b: dict[Any, tuple[int, np.ndarray]]) -> bool:
    return sorted(a) == sorted(b) and all(
        a[k][0] == b[k][0] and np.array_equal(a[k][1], b[k][1]) for k in a)


def _timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def run(name: str, reports: int, workers: int, repeat: int, workdir: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from chorus_collector.jobs.aggregate import recompute
    from chorus_collector.jobs.distributed import (
        TASK_REPORTS,
        fold_with_cluster,
        recompute_on_cluster,
    )
    from chorus_collector.jobs.folding import fold
    from chorus_collector.storage import SQLiteStorage

    db = workdir / "bench.db"
    _, build_s = _timed(lambda: build(db, name, reports))
    twin = workdir / "twin.db"
    # SQLite's own copy: a plain file copy would close a descriptor of the open database and
    # with it this process's POSIX locks on it.
    with contextlib.closing(sqlite3.connect(db)) as src, \
            contextlib.closing(sqlite3.connect(twin)) as dst:
        src.backup(dst)
    storage = SQLiteStorage(str(db))
    # At least 4 tasks per worker, so that small runs keep every worker busy too.
    task_reports = min(TASK_REPORTS, max(1, math.ceil(reports / (4 * workers))))
    out: dict[str, Any] = {"mechanism": name, "reports": reports, "workers": workers,
                           "task_reports": task_reports, "repeat": repeat, "build_s": build_s}
    cluster, out["cluster_start_s"] = _timed(lambda: LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        # The scheduler's /health and /metrics on a free port, not 8787 (the test suite runs
        # this beside its own clusters).
        dashboard_address=None,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"}))
    with cluster, Client(cluster, set_as_default=False) as client:
        # Workers are fresh processes: they import the estimators once, as a running
        # cluster already has (the pool's forked processes inherit them from this one).
        _, warm_up = _timed(lambda: client.run(importlib.import_module,
                                               "chorus_collector.jobs.distributed"))
        out["cluster_start_s"] += warm_up
        pool_s, dask_s = [], []
        rounds = [(f"round {i + 1} of {repeat}", i) for i in range(repeat)]
        for _ in staged(rounds, "recompute, pool and Dask"):
            # interleaved: a change in the machine's load hits both
            pool, seconds = _timed(
                lambda: recompute(storage, name, workers=workers, through=reports))
            pool_s.append(seconds)
            dask, seconds = _timed(lambda: recompute_on_cluster(
                storage, name, client, through=reports, task_reports=task_reports))
            dask_s.append(seconds)
            assert _same(pool, dask), "the cluster's statistics differ from the pool's"
        out["pool_recompute_s"], out["dask_recompute_s"] = min(pool_s), min(dask_s)
        out["pool_recompute_runs_s"], out["dask_recompute_runs_s"] = pool_s, dask_s
        folded, out["dask_fold_s"] = _timed(lambda: fold_with_cluster(
            SQLiteStorage(str(twin)), client, task_reports=task_reports))
    assert folded == reports
    local, out["in_process_fold_s"] = _timed(lambda: fold(storage))
    assert local == reports
    assert SQLiteStorage(str(db)).folded_statistics(1).buckets == \
        SQLiteStorage(str(twin)).folded_statistics(1).buckets, "the folds differ"
    out["recompute_ratio_dask_to_pool"] = out["dask_recompute_s"] / out["pool_recompute_s"]
    out["fold_ratio_dask_to_in_process"] = out["dask_fold_s"] / out["in_process_fold_s"]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10⁵ reports (a smoke test)")
    parser.add_argument("--reports", type=int, default=None, help="default 10⁷")
    parser.add_argument("--mechanism", choices=sorted(SPECS), default="krr")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3, help="recomputations each (best kept)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/dask_aggregation.json"))
    args = parser.parse_args(argv)
    reports = args.reports or (100_000 if args.quick else 10_000_000)
    with tempfile.TemporaryDirectory(prefix="chorus-dask-") as tmp:
        result = run(args.mechanism, reports, args.workers, args.repeat, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    r = result
    print(f"{r['mechanism']}: {r['reports']:,} reports, {r['workers']} workers, "
          f"{r['task_reports']:,} reports a task (database built in {r['build_s']:.1f} s)")
    print(f"{'':<34}{'seconds':>9}{'reports/s':>14}")
    for label, key in (("recompute, process pool", "pool_recompute_s"),
                       ("recompute, Dask LocalCluster", "dask_recompute_s"),
                       ("fold, in process (one core)", "in_process_fold_s"),
                       ("fold, Dask LocalCluster", "dask_fold_s")):
        print(f"{label:<34}{r[key]:>9.2f}{r['reports'] / r[key]:>14,.0f}")
    print(f"recompute: best of {r['repeat']} runs each, interleaved; cluster start: "
          f"{r['cluster_start_s']:.2f} s (not counted above)")
    print(f"recompute Dask / pool: {r['recompute_ratio_dask_to_pool']:.2f} (target <= 1.10); "
          f"fold Dask / in process: {r['fold_ratio_dask_to_in_process']:.2f}")
    print(f"\nwritten to {args.out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
