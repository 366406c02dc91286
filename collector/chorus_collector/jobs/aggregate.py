"""Batch aggregation on every core: map in a process pool, merge by addition.

The collector's statistics are folded incrementally from the appended reports
(``chorus_collector.jobs.folding``). This module recomputes them from the stored raw reports
(re-analysis, or checking that the folded statistics are exactly what the reports at or
below the watermark give) with the same map / merge core the estimators define: a pure
``map`` from a chunk of payloads to an additive int64 vector, summed per time bucket. The
chunks run in a process pool (one process per core by default). The same map and sum run on
a Dask cluster in ``chorus_collector.jobs.distributed``, and on Spark over a Parquet export
(docs/spark.md).

Memory stays bounded: reports are streamed from SQLite in chunks and at most two chunks per
worker are in flight.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chorus_collector.estimators import estimator_for
from chorus_collector.jobs.folding import map_payloads
from chorus_collector.storage import Storage, state_array
from chorus_shared.campaign import Campaign, campaign_from_config

__all__ = ["BucketCheck", "Buckets", "Recompute", "check_aggregates", "map_chunk", "recompute"]

CHUNK = 20_000

Buckets = dict[int, tuple[int, np.ndarray]]  # time bucket → (reports, statistic)
# Another engine's recomputation: (storage, campaign name, watermark) → buckets.
Recompute = Callable[[Storage, str, int], Buckets]


@lru_cache(maxsize=16)
def _campaign(config_json: str) -> Campaign:
    return campaign_from_config(json.loads(config_json), warn=False)


def map_chunk(config_json: str, payload_jsons: list[str]) -> np.ndarray:
    """The map step for one chunk of stored (canonical, validated) payloads."""
    return map_payloads(_campaign(config_json), payload_jsons)


def _chunks(storage: Storage, campaign_id: int, through: int,
            chunk: int) -> Iterator[tuple[int, list[str]]]:
    """(time bucket, payloads) in chunks of at most ``chunk`` reports."""
    bucket: int | None = None
    payloads: list[str] = []
    for time, payload in storage.folded_report_rows(campaign_id, through):
        if bucket is not None and (time != bucket or len(payloads) >= chunk):
            yield bucket, payloads
            payloads = []
        bucket = time
        payloads.append(payload)
    if bucket is not None:
        yield bucket, payloads


def recompute(storage: Storage, name: str, workers: int | None = None, chunk: int = CHUNK,
              through: int | None = None,
              progress: Callable[[int], None] = lambda reports: None) -> Buckets:
    """Per time bucket (number of reports, statistic) recomputed from the raw reports at or
    below the watermark ``through`` (default: the current one). ``progress`` is told how
    many reports each merged chunk held."""
    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    if through is None:
        through = storage.fold_status().watermark
    config_json = json.dumps(stored.campaign.public_config(), sort_keys=True)
    estimator = estimator_for(stored.campaign.mechanism.name)
    size = estimator.state_size(stored.campaign.mechanism)
    buckets: Buckets = {}
    workers = workers or os.cpu_count() or 1

    def merge(time: int, count: int, state: np.ndarray) -> None:
        n, total = buckets.get(time, (0, np.zeros(size, dtype=np.int64)))
        buckets[time] = (n + count, total + state)
        progress(count)

    chunks: Iterable[tuple[int, list[str]]] = _chunks(storage, stored.id, through, chunk)
    if workers == 1:
        for time, payloads in chunks:
            merge(time, len(payloads), map_chunk(config_json, payloads))
        return buckets
    with ProcessPoolExecutor(workers) as pool:
        pending: list[tuple[int, int, Future[np.ndarray]]] = []
        for time, payloads in chunks:
            pending.append((time, len(payloads), pool.submit(map_chunk, config_json,
                                                             payloads)))
            while len(pending) >= 2 * workers:  # bounded: stream, never load everything
                t, count, future = pending.pop(0)
                merge(t, count, future.result())
        for t, count, future in pending:
            merge(t, count, future.result())
    return buckets


@dataclass(frozen=True)
class BucketCheck:
    time: int
    stored_n: int
    recomputed_n: int
    retired: int  # reports dropped by gc: the bucket's statistic cannot be recomputed
    matches: bool  # counts add up and, with nothing retired, the statistics are identical


def check_aggregates(storage: Storage, name: str, workers: int | None = None,
                     chunk: int = CHUNK, recompute_with: Recompute | None = None,
                     progress: Callable[[int], None] = lambda reports: None
                     ) -> list[BucketCheck]:
    """Compare the folded statistics with a recomputation from the raw reports they were
    folded from (those at or below the watermark, read in the same snapshot): on this
    machine's process pool, or with ``recompute_with`` (a Dask cluster)."""
    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    folded = storage.folded_statistics(stored.id)
    if recompute_with is None:
        recomputed = recompute(storage, name, workers, chunk, through=folded.watermark,
                               progress=progress)
    else:
        recomputed = recompute_with(storage, name, folded.watermark)
    checks = []
    seen = set()
    for time, n, blob in folded.buckets:
        seen.add(time)
        count, state = recomputed.get(time, (0, None))
        retired = folded.retired.get(time, 0)
        same = count + retired == n and (retired > 0 or (
            state is not None and bool(np.array_equal(state, state_array(blob)))))
        checks.append(BucketCheck(time, n, count, retired, same))
    for time, (count, _) in recomputed.items():
        if time not in seen:
            checks.append(BucketCheck(time, 0, count, folded.retired.get(time, 0), False))
    return sorted(checks, key=lambda c: c.time)
