"""Batch aggregation on every core: map in a process pool, merge by addition.

The collector's statistics are updated incrementally at ingest. This module recomputes them
from the stored raw reports (re-analysis, or checking that the incremental statistics are
exactly what the reports give) with the same map / merge core the estimators define: a pure
``map`` from a chunk of payloads to an additive int64 vector, summed per time bucket. The
chunks run in a process pool (one process per core by default); a distributed engine (Spark,
Dask, Beam) can run the same ``map_chunk`` and a sum instead.

Memory stays bounded: reports are streamed from SQLite in chunks and at most two chunks per
worker are in flight.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chorus_collector.estimators import estimator_for
from chorus_collector.storage import Storage, state_array
from chorus_shared.campaign import Campaign, campaign_from_config

__all__ = ["BucketCheck", "check_aggregates", "map_chunk", "recompute"]

CHUNK = 20_000


@lru_cache(maxsize=16)
def _campaign(config_json: str) -> Campaign:
    return campaign_from_config(json.loads(config_json), warn=False)


def map_chunk(config_json: str, payload_jsons: list[str]) -> np.ndarray:
    """The map step for one chunk of stored (canonical, validated) payloads."""
    campaign = _campaign(config_json)
    payloads = [json.loads(p) for p in payload_jsons]
    return estimator_for(campaign.mechanism.name).map(campaign.mechanism, payloads)


def _chunks(storage: Storage, campaign_id: int,
            chunk: int) -> Iterator[tuple[int, list[str], int]]:
    """(time bucket, payloads, scrubbed count) in chunks of at most ``chunk`` reports."""
    rows = storage.report_rows(campaign_id)
    bucket: int | None = None
    payloads: list[str] = []
    scrubbed = 0
    for time, payload in rows:
        if bucket is not None and (time != bucket or len(payloads) >= chunk):
            yield bucket, payloads, scrubbed
            payloads, scrubbed = [], 0
        bucket = time
        if payload:
            payloads.append(payload)
        else:
            scrubbed += 1
    if bucket is not None:
        yield bucket, payloads, scrubbed


def recompute(storage: Storage, name: str, workers: int | None = None,
              chunk: int = CHUNK) -> tuple[dict[int, tuple[int, np.ndarray]], dict[int, int]]:
    """Per time bucket (number of reports, statistic) recomputed from the raw reports, and
    per bucket the number of reports whose payload was scrubbed (expired), which cannot be
    used."""
    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    config_json = json.dumps(stored.campaign.public_config(), sort_keys=True)
    estimator = estimator_for(stored.campaign.mechanism.name)
    size = estimator.state_size(stored.campaign.mechanism)
    buckets: dict[int, tuple[int, np.ndarray]] = {}
    skipped: dict[int, int] = {}
    workers = workers or os.cpu_count() or 1

    def merge(time: int, count: int, state: np.ndarray) -> None:
        n, total = buckets.get(time, (0, np.zeros(size, dtype=np.int64)))
        buckets[time] = (n + count, total + state)

    chunks: Iterable[tuple[int, list[str], int]] = _chunks(storage, stored.id, chunk)
    if workers == 1:
        for time, payloads, scrubbed in chunks:
            skipped[time] = skipped.get(time, 0) + scrubbed
            merge(time, len(payloads), map_chunk(config_json, payloads))
        return buckets, skipped
    with ProcessPoolExecutor(workers) as pool:
        pending: list[tuple[int, int, Future[np.ndarray]]] = []
        for time, payloads, scrubbed in chunks:
            skipped[time] = skipped.get(time, 0) + scrubbed
            pending.append((time, len(payloads), pool.submit(map_chunk, config_json,
                                                             payloads)))
            while len(pending) >= 2 * workers:  # bounded: stream, never load everything
                t, count, future = pending.pop(0)
                merge(t, count, future.result())
        for t, count, future in pending:
            merge(t, count, future.result())
    return buckets, skipped


@dataclass(frozen=True)
class BucketCheck:
    time: int
    stored_n: int
    recomputed_n: int
    scrubbed: int  # expired payloads: the bucket cannot be recomputed in full
    matches: bool


def check_aggregates(storage: Storage, name: str, workers: int | None = None,
                     chunk: int = CHUNK) -> list[BucketCheck]:
    """Compare the incremental statistics with a recomputation from the raw reports."""
    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    recomputed, scrubbed = recompute(storage, name, workers, chunk)
    rows = storage.aggregate_rows(stored.id)
    checks = []
    seen = set()
    for time, n, blob in rows:
        seen.add(time)
        entry = recomputed.get(time)
        count = entry[0] if entry else 0
        same = entry is not None and count == n and bool(
            np.array_equal(entry[1], state_array(blob)))
        checks.append(BucketCheck(time, n, count, scrubbed.get(time, 0), same))
    for time, (count, _) in recomputed.items():
        if time not in seen:
            checks.append(BucketCheck(time, 0, count, scrubbed.get(time, 0), False))
    return sorted(checks, key=lambda c: c.time)
