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
optimisation only, kept short and given back when a folder stops (``jobs/lease.py``). An
estimate reads the folded statistics and maps the unfolded tail in one snapshot, page by page
with this job's map (``jobs/tail.py``), so answers are complete whatever the job's lag, and it
says how fresh the folded part is.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from chorus_collector.estimators import estimator_for
from chorus_collector.jobs.lease import FoldLease
from chorus_collector.storage import PayloadGroup, Storage
from chorus_shared.campaign import Campaign

__all__ = ["BackgroundFolder", "FoldFollower", "Partials", "fold", "fold_once", "map_groups",
           "map_payloads"]

log = logging.getLogger("chorus.folding")

FOLD_CHUNK = 20_000  # reports per fold transaction: bounds the job's memory and lock time
FOLDER_NICENESS = 10
STOP_SECONDS = 10.0  # a stopping folder waits this long for its chunk (gunicorn: 30 s)

# Additive partial statistics: (report count, statistic) per (campaign id, time bucket).
Partials = dict[tuple[int, int], tuple[int, np.ndarray]]


def _no_fault(step: str) -> None:
    del step


def _ignore(campaign_ids: Iterable[int]) -> None:
    del campaign_ids


class FoldFollower(Protocol):
    """What follows a folder's work (the alerts, ``chorus_collector.alerts.AlertWork``): the
    folder knows only these two calls, so the job stays below what it feeds."""

    def after_fold(self, campaign_ids: Iterable[int]) -> object:
        """Called by the lease holder, still holding it, after a run that folded reports of
        these campaigns: one call per fold across workers and replicas."""

    def every_round(self) -> object:
        """Called after every round of every folder, lease or not."""


def map_payloads(campaign: Campaign, payload_jsons: Sequence[str]) -> np.ndarray:
    """The estimator's map over stored canonical payloads: an additive int64 vector (the
    recomputation's map step; the fold's and the estimates' tail's, through map_groups)."""
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
              step: Callable[[str], None] = _no_fault,
              folded: Callable[[Iterable[int]], None] = _ignore) -> int | None:
    """Fold up to ``limit`` reports past the watermark. Returns how many (0: nothing to
    fold), or None when another fold moved the watermark first (nothing was changed).
    ``folded`` is given the ids of the campaigns whose reports it committed.

    ``step`` is called at every step, by name (fault injection in the tests): "read",
    "map", "begin", "merge" (after each bucket), "watermark", "commit" (after the commit).
    """
    step("read")
    chunk = storage.unfolded(limit)
    if not chunk.reports:
        return 0
    step("map")
    partials = map_groups(storage, chunk.groups)
    if not storage.commit_fold(chunk.watermark, chunk.through, partials, clock(), step,
                               moves=chunk.moves):
        return None
    step("commit")
    folded({group.campaign_id for group in chunk.groups})
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


class BackgroundFolder:
    """Folds every ``interval`` seconds in a daemon thread of this process.

    Started in each server worker after the fork (no thread survives a fork); several
    folders, in one process or many, share the work through the lease and stay exact through
    the watermark check. ``stop`` (the server's worker exit, or the interpreter's exit)
    lets the chunk in hand finish and gives the lease back.
    """

    def __init__(self, storage: Storage, interval: float,
                 clock: Callable[[], float] = time.time, role: str = "folder",
                 follower: FoldFollower | None = None) -> None:
        self.storage = storage
        self.interval = interval
        self.clock = clock
        self.follower = follower
        self.lease = FoldLease(storage, role, clock=clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="chorus-folder", daemon=True)
        self._thread.start()
        atexit.register(self.stop)  # a process that exits without stopping it still releases

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop folding after the chunk in hand, and give the lease back (at once, even if
        that chunk outlasts ``timeout``: its commit stays exact, and the process ends)."""
        self._stop.set()
        atexit.unregister(self.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.lease.close()

    def run_once(self) -> int:
        """Fold what is pending if no other folder holds the lease; how many were folded.
        The follower's ``after_fold`` runs under the lease when reports were folded, its
        ``every_round`` after every round."""
        self.storage.maintain(self.clock())
        folded = 0
        if self.storage.any_unfolded():  # else no write transaction for the lease
            campaigns: set[int] = set()
            with self.lease.hold() as held:
                # Chunk by chunk, so that a stop or a lost lease ends the run between commits.
                while held and not self._stop.is_set() and not self.lease.lost.is_set():
                    count = fold_once(self.storage, clock=self.clock, folded=campaigns.update)
                    if count == 0:
                        break
                    folded += count or 0
                if campaigns and self.follower is not None and not self.lease.lost.is_set():
                    self.follower.after_fold(campaigns)
        if self.follower is not None and not self._stop.is_set():
            self.follower.every_round()
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
