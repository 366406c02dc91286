"""The aggregation job's map / merge on a Dask cluster (the optional ``dask`` extra).

The map step runs as Dask tasks, and the merge is an addition in the driver, done as each task
completes. There are three jobs:

* ``fold_with_cluster`` (``chorus aggregate --scheduler``): the fold of
  ``chorus_collector.jobs.folding`` over every report past the watermark, split into seq ranges
  and committed with the same compare-and-set (``Storage.commit_fold``). The statistics are
  the ones the in-process fold gives (int64 sums: order and chunking do not matter), and a
  fold that races it in a server cannot make a report count twice;
* ``recompute_on_cluster`` (``chorus check-aggregates --scheduler``): ``aggregate.recompute``
  of one campaign;
* ``aggregate_parquet`` (``chorus aggregate --from-parquet``): the same per-bucket statistics
  from a Parquet export (``chorus_collector.jobs.export``).

Each task gets the database path (a string) and opens its own ``Storage``: a connection cannot
travel to another process, and no payload passes through the driver, which only adds vectors
of the estimator's state size. With SQLite the workers must see the database file on the
collector's host (WAL needs shared memory, so not over NFS); a cluster that spans hosts reads
a Parquet export on shared storage instead.

A Dask scheduler runs whatever code its clients send it: keep it on loopback or a private
network (docker-compose.yml publishes none of its ports). dask is imported only when a
cluster is used.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from chorus_collector.extras import require
from chorus_collector.jobs.aggregate import Buckets, Recompute
from chorus_collector.jobs.export import ParquetExport, map_row_group, read_export, row_groups
from chorus_collector.jobs.folding import Partials, map_groups
from chorus_collector.jobs.lease import FoldLease
from chorus_collector.storage import Storage, open_storage

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["TASK_REPORTS", "aggregate_parquet", "cluster_recompute", "connect",
           "fold_on_cluster", "fold_with_cluster", "map_range", "recompute_on_cluster"]

# Seqs per task: bounds a task's memory (its rows, ~100 MB of Python objects at most) and
# keeps a task long enough (about 0.1–1 s of map) that Dask's ~1 ms per task is noise.
TASK_REPORTS = 100_000
CONNECT_TIMEOUT = 30.0
MAX_ROUNDS = 10  # folds of what arrived meanwhile, before a run gives up chasing ingest

K = TypeVar("K")


def _no_fault(step: str) -> None:
    del step


@contextlib.contextmanager
def connect(address: str, timeout: float | None = None) -> Iterator[Client]:
    """A client of the scheduler at ``address`` (tcp://HOST:PORT). Raises ``ExtraMissing``
    without the dask extra, ``OSError`` when the scheduler cannot be reached."""
    require("distributed", "dask", "Running on a Dask cluster (--scheduler)")
    from distributed import Client

    with Client(address, timeout=timeout or CONNECT_TIMEOUT, set_as_default=False) as client:
        yield client


def _for_workers(database: str) -> str:
    """The database as a worker opens it: an absolute path (workers have their own working
    directory); a URL is left as it is."""
    return database if "://" in database else os.path.abspath(database)


def _ranges(after: int, through: int, size: int) -> list[tuple[int, int]]:
    """(after, through] cut into ranges of at most ``size`` seqs."""
    return [(start, min(start + size, through)) for start in range(after, through, size)]


def _add(total: dict[K, tuple[int, np.ndarray]], part: dict[K, tuple[int, np.ndarray]]) -> None:
    for key, (count, state) in part.items():
        n, summed = total.get(key, (0, None))
        total[key] = (n + count, state if summed is None else summed + state)


def _run(client: Client, task: Callable[..., dict[K, tuple[int, np.ndarray]]],
         args: Sequence[tuple[Any, ...]],
         progress: Callable[[], None] = lambda: None) -> dict[K, tuple[int, np.ndarray]]:
    """Run ``task`` once per argument tuple on the cluster and add up the results as they
    complete; the first failure cancels the rest and is raised."""
    from distributed import as_completed

    # pure=False: the same range can hold other reports later (gc), so never reuse a result.
    futures = [client.submit(task, *arg, pure=False) for arg in args]
    total: dict[K, tuple[int, np.ndarray]] = {}
    try:
        for future in as_completed(futures, loop=client.loop):  # this client's, not a default
            _add(total, future.result())
            future.release()  # the sum has it: free the worker's copy now
            progress()
    finally:
        client.cancel(futures)
    return total


def map_range(database: str, after: int, through: int,
              campaign_id: int | None = None) -> Partials:
    """A task: the fold's map over the reports with after < seq <= through (of one campaign
    if given), read from a storage of its own."""
    storage = open_storage(database)
    try:
        return map_groups(storage, storage.payload_groups(after, through, campaign_id))
    finally:
        storage.close()


def fold_on_cluster(storage: Storage, client: Client, *, task_reports: int = TASK_REPORTS,
                    clock: Callable[[], float] = time.time,
                    progress: Callable[[], None] = lambda: None,
                    step: Callable[[str], None] = _no_fault) -> int | None:
    """Fold, in one commit, every report appended before the call. Returns how many were
    folded, or None when another fold moved the watermark first (then nothing changed).

    ``step`` is called as ``fold_once`` calls it: "map" once the tasks are planned, then
    ``commit_fold``'s steps, then "commit" (fault injection in the tests)."""
    status = storage.fold_status()
    if status.unfolded == 0:
        return 0
    expected = status.watermark
    # No report can still appear at or below the horizon (SQLite commits appends in seq
    # order; on PostgreSQL the horizon is read once the appends in flight have committed).
    through = storage.append_horizon()
    if through <= expected:
        return 0
    step("map")
    args = [(_for_workers(storage.path), a, b) for a, b in _ranges(expected, through,
                                                                    task_reports)]
    partials: Partials = _run(client, map_range, args, progress)
    if not storage.commit_fold(expected, through, partials, clock(), step,
                               moves=status.moves):
        return None
    step("commit")
    return sum(count for count, _ in partials.values())


def fold_with_cluster(storage: Storage, client: Client, *, task_reports: int = TASK_REPORTS,
                      max_rounds: int = MAX_ROUNDS,
                      clock: Callable[[], float] = time.time) -> int:
    """Fold on the cluster until nothing is pending (or ``max_rounds`` folds), holding the
    fold lease so that the servers' folders wait instead of doing the work twice (a fold of
    10⁹ reports outlasts the lease: its heartbeat keeps it while the tasks run). Returns how
    many reports were folded: 0 when another folder holds the lease."""
    if storage.fold_status().unfolded == 0:
        return 0  # nothing to do: no write transaction for the lease
    lease = FoldLease(storage, "dask", clock=clock)
    folded = 0
    with lease.hold() as held:
        for _ in range(max_rounds if held else 0):
            if storage.fold_status().unfolded == 0 or lease.lost.is_set():
                break
            folded += fold_on_cluster(storage, client, task_reports=task_reports,
                                      clock=clock) or 0
    return folded


def recompute_on_cluster(storage: Storage, name: str, client: Client,
                         through: int | None = None,
                         task_reports: int = TASK_REPORTS) -> Buckets:
    """``aggregate.recompute`` on the cluster: per time bucket (reports, statistic) of
    campaign ``name``'s reports at or below ``through`` (default: the watermark)."""
    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    if through is None:
        through = storage.fold_status().watermark
    database = _for_workers(storage.path)
    partials: Partials = _run(client, map_range, [(database, a, b, stored.id) for a, b
                                                  in _ranges(0, through, task_reports)])
    return {time: value for (_, time), value in partials.items()}


def cluster_recompute(client: Client, task_reports: int = TASK_REPORTS) -> Recompute:
    """``recompute_on_cluster`` as ``aggregate.check_aggregates(recompute_with=...)`` takes it."""
    def run(storage: Storage, name: str, through: int) -> Buckets:
        return recompute_on_cluster(storage, name, client, through, task_reports)

    return run


def aggregate_parquet(directory: Path,
                      client: Client | None = None) -> tuple[ParquetExport, Buckets]:
    """Per time bucket (reports, statistic) of a Parquet export, one task per row group on
    the cluster (or here, one row group at a time, without one). The files must be at the
    same path on every worker: shared storage."""
    export = read_export(directory.resolve())
    args = [(path, index, export.config_json()) for path, index in row_groups(export)]
    if client is not None:
        return export, _run(client, map_row_group, args)
    total: Buckets = {}
    for arg in args:
        _add(total, map_row_group(*arg))
    return export, total
