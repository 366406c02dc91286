"""The aggregation job: fold appended reports into the per-bucket statistics.

Ingest only appends reports (each gets the next ``seq``). This job reads the reports past the
watermark in append order, maps them with their estimators outside any transaction, then adds
the partial statistics and moves the watermark in one short write transaction that first
checks the watermark is still where it read it. So the job is idempotent and resumable:

- a crash (or an exception) before that transaction commits changes nothing, and the next run
  folds the same reports again;
- two folds that race (two workers, two replicas, ``chorus aggregate`` beside the server)
  cannot both count a report: the second one's check fails and it discards its work.

A lease in the same row keeps concurrent folders from doing the work twice; it is an
optimisation only. An estimate reads the folded statistics and maps the unfolded tail of its
window in one snapshot (``estimate_inputs``), so answers are complete whatever the job's lag,
and it says how fresh the folded part is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chorus_collector.estimators import estimator_for
from chorus_collector.storage import PayloadGroup, Storage, StoredCampaign
from chorus_shared.campaign import Campaign

__all__ = ["BackgroundFolder", "EstimateInputs", "Partials", "estimate_inputs", "fold", "fold_once",
           "map_groups"]

log = logging.getLogger("chorus.folding")

FOLD_CHUNK = 20_000  # reports per fold transaction: bounds the job's memory and lock time
LEASE_SECONDS = 120.0
FOLDER_NICENESS = 10

# Additive partial statistics: (report count, statistic) per (campaign id, time bucket).
Partials = dict[tuple[int, int], tuple[int, np.ndarray]]


def _no_fault(step: str) -> None:
    del step


def map_payloads(campaign: Campaign, payload_jsons: Sequence[str]) -> np.ndarray:
    """The estimator's map over stored canonical payloads: an additive int64 vector (the
    estimates' tail's and the recomputation's map step; the fold's, through map_groups)."""
    return map_parsed(campaign, json.loads("[" + ",".join(payload_jsons) + "]"))


def map_parsed(campaign: Campaign, payloads: list[Any]) -> np.ndarray:
    mechanism = campaign.mechanism
    return estimator_for(mechanism.name).map(mechanism, payloads)


def map_groups(storage: Storage, groups: Iterable[PayloadGroup]) -> Partials:
    """The fold's map step, wherever it runs (here, or in a Dask task over a seq range):
    (report count, statistic) per (campaign id, time bucket) of grouped stored payloads."""
    partials: Partials = {}
    for group in groups:
        campaign = storage.get_campaign_by_id(group.campaign_id).campaign
        partials[(group.campaign_id, group.time)] = (group.reports,
                                                     map_parsed(campaign, group.parsed()))
    return partials


def fold_once(storage: Storage, *, limit: int = FOLD_CHUNK, clock: Callable[[], float] = time.time,
              step: Callable[[str], None] = _no_fault) -> int | None:
    """Fold up to ``limit`` reports past the watermark. Returns how many (0: nothing to
    fold), or None when another fold moved the watermark first (nothing was changed).

    ``step`` is called at every step, by name (fault injection in the tests): "read",
    "map", "begin", "merge" (after each bucket), "watermark", "commit" (after the commit).
    """
    step("read")
    chunk = storage.unfolded(limit)
    if not chunk.reports:
        return 0
    step("map")
    partials = map_groups(storage, chunk.groups)
    if not storage.commit_fold(chunk.watermark, chunk.through, partials, clock(), step):
        return None
    step("commit")
    return chunk.reports


def fold(storage: Storage, *, limit: int = FOLD_CHUNK, max_rounds: int | None = None,
         clock: Callable[[], float] = time.time,
         step: Callable[[str], None] = _no_fault) -> int:
    """Fold until the watermark reaches the last appended report (or ``max_rounds`` folds);
    returns how many reports this call folded."""
    folded = 0
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        rounds += 1
        count = fold_once(storage, limit=limit, clock=clock, step=step)
        if count == 0:
            break
        folded += count or 0
    return folded


@dataclass(frozen=True)
class EstimateInputs:
    """What an estimate of one window is computed from."""

    n: int
    state: np.ndarray
    unfolded: int  # of the n reports, those mapped at query time (past the watermark)
    folded_at: float | None  # when the statistics were last folded (None: never)

    def freshness(self) -> dict[str, Any]:
        return {"folded_at": self.folded_at, "unfolded_reports": self.unfolded}


def estimate_inputs(storage: Storage, stored: StoredCampaign, start: int | None,
                    end: int | None) -> EstimateInputs:
    """The window's folded statistics plus its unfolded tail, mapped now: complete at once."""
    mechanism = stored.campaign.mechanism
    size = estimator_for(mechanism.name).state_size(mechanism)
    snapshot = storage.window_snapshot(stored.id, size, start, end)
    state = snapshot.state
    for offset in range(0, len(snapshot.tail), FOLD_CHUNK):
        chunk = [payload for _, payload in snapshot.tail[offset:offset + FOLD_CHUNK]]
        state = state + map_payloads(stored.campaign, chunk)
    return EstimateInputs(snapshot.n + len(snapshot.tail), state, len(snapshot.tail),
                          snapshot.folded_at)


class BackgroundFolder:
    """Folds every ``interval`` seconds in a daemon thread of this process.

    Started in each server worker after the fork (no thread survives a fork); several
    folders, in one process or many, share the work through the lease and stay exact through
    the watermark check.
    """

    def __init__(self, storage: Storage, interval: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.interval = interval
        self.clock = clock
        self.holder = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="chorus-folder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_once(self) -> int:
        """Fold what is pending if no other folder holds the lease; how many were folded."""
        self.storage.maintain(self.clock())
        if not self.storage.any_unfolded():
            return 0  # nothing to do: no write transaction for the lease
        folded = 0
        while self.storage.claim_fold(self.holder, self.clock(), LEASE_SECONDS):
            count = fold_once(self.storage, clock=self.clock)
            if count == 0:
                break
            folded += count or 0
        self.storage.release_fold(self.holder)
        return folded

    def _run(self) -> None:
        # Folding is background work: on Linux a thread has its own nice value (and the
        # threads it starts inherit it), so requests keep the cores when both want them.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FOLDER_NICENESS)
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception as error:  # the next round retries
                if not self.storage.unavailable(error):  # an outage is logged once, there
                    log.exception("folding reports into the statistics failed; retrying")
            finally:
                self.storage.close()
