"""The unfolded tail a query adds to the folded statistics: read page by page, mapped once.

An estimate sums the folded statistics of its window and maps the reports past the fold's
watermark (the tail), so it is complete whatever the fold's lag. The tail is usually a few
seconds of reports, but it grows without bound when folding falls behind: after a restore or
a burst, with ``FOLD_INTERVAL=0`` and no ``chorus aggregate --follow``, or while a stuck
process holds the fold lease. So a query never holds the tail whole:

* storage hands it over in pages of at most ``Storage.tail_page`` reports, in append order and
  in the query's one snapshot (``Storage.bucket_snapshot``); each page is mapped with the
  fold's own map (``folding.map_groups``) into per-bucket partial statistics and dropped. A
  query's memory is O(page + buckets × state size), not O(tail).
* a process maps each report of the tail once. Per campaign it keeps the partial statistics
  of the *settled* tail (the reports at or below a horizon every append below which has
  committed: no report can still appear there), in segments of the append order. The next
  query maps only what was appended since; after a fold moves the watermark it drops the
  segments the fold took and re-reads only the segment the watermark cut. Reports past the
  horizon (appends in flight a moment ago) are mapped for the one query, not kept.

Segments are merged pairwise past ``SEGMENTS`` and a process keeps at most ``CACHE_BYTES`` of
them (least recently used campaigns go first), so the cache is bounded too. The first query
on a campaign maps the campaign's whole tail, not only its window's, and a second query on
the same campaign waits for it (inside its query slot) and then reuses its work.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chorus_collector.estimators import estimator_for
from chorus_collector.jobs.folding import map_groups
from chorus_collector.storage import Storage, StoredCampaign, TailPage, TailPages

__all__ = ["CACHE_BYTES", "SEGMENTS", "EstimateInputs", "TailRead", "estimate_inputs",
           "read_tail"]

SEGMENTS = 32  # segments kept per campaign: a watermark cuts one, ~1/SEGMENTS of the tail
CACHE_BYTES = 64 * 2**20  # statistics kept per process, all campaigns together

# time bucket → (reports, summed statistic)
Buckets = dict[int, tuple[int, np.ndarray]]


def _add(into: Buckets, more: Iterable[tuple[int, tuple[int, np.ndarray]]]) -> None:
    """Add ``more`` to ``into``, bucket by bucket (new arrays: a kept one is never changed)."""
    for time, (n, state) in more:
        had = into.get(time)
        into[time] = (n, state) if had is None else (had[0] + n, had[1] + state)


@dataclass
class _Segment:
    """The partial statistics of a campaign's reports with after < seq <= through."""

    after: int
    through: int
    buckets: Buckets

    def nbytes(self) -> int:
        return sum(state.nbytes for _, state in self.buckets.values())


@dataclass
class _Campaign:
    """What a process keeps of one campaign's settled tail: segments covering watermark <
    seq <= covered, in order. The lock lets one query at a time read and extend it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    watermark: int = -1
    covered: int = -1
    segments: list[_Segment] = field(default_factory=list)

    def nbytes(self) -> int:
        return sum(segment.nbytes() for segment in self.segments)

    def reset(self, watermark: int) -> None:
        self.watermark = self.covered = watermark
        self.segments = []


class _Cache:
    """One storage's kept tails, by campaign id, least recently used first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.campaigns: OrderedDict[int, _Campaign] = OrderedDict()

    def campaign(self, campaign_id: int) -> _Campaign:
        with self.lock:
            kept = self.campaigns.get(campaign_id)
            if kept is None:
                kept = self.campaigns[campaign_id] = _Campaign()
            self.campaigns.move_to_end(campaign_id)
            return kept

    def trim(self, limit: int) -> None:
        """Forget the least recently used campaigns until the rest fit in ``limit`` bytes (a
        query still reading one keeps its own reference; only later ones start over)."""
        with self.lock:
            sizes = {campaign_id: kept.nbytes() for campaign_id, kept in self.campaigns.items()}
            total = sum(sizes.values())
            for campaign_id in list(self.campaigns):
                if total <= limit:
                    break
                del self.campaigns[campaign_id]
                total -= sizes[campaign_id]


_caches: weakref.WeakKeyDictionary[Storage, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache(storage: Storage) -> _Cache:
    with _caches_lock:
        cache = _caches.get(storage)
        if cache is None:
            cache = _caches[storage] = _Cache()
        return cache


class TailRead:
    """One query's read of a campaign's unfolded tail (the ``Storage.TailReader`` it passes to
    ``bucket_snapshot``): after the read, ``buckets`` holds the whole tail's partial
    statistics per time bucket (kept segments plus what only this query mapped)."""

    def __init__(self, storage: Storage, kept: _Campaign, limit: int) -> None:
        self.storage = storage
        self.kept = kept
        self.limit = limit
        self.buckets: Buckets = {}
        self.mapped = 0  # reports this query mapped itself (the rest came from the cache)

    def _map(self, pages: Iterator[TailPage]) -> Iterator[_Segment]:
        for page in pages:
            partials = map_groups(self.storage, page.groups)
            self.mapped += sum(n for n, _ in partials.values())
            yield _Segment(page.after, page.through,
                           {time: value for (_, time), value in partials.items()})

    def read(self, watermark: int, horizon: int, pages: TailPages) -> None:
        kept = self.kept
        if watermark < kept.watermark or kept.covered < watermark:
            kept.reset(watermark)  # another database, or the fold passed all we kept
        elif watermark > kept.watermark:  # a fold took the oldest segments
            segments = [s for s in kept.segments if s.through > watermark]
            if segments and segments[0].after < watermark:  # the one the watermark cut
                cut = segments[0]
                again: Buckets = {}
                for part in self._map(pages(watermark, cut.through)):
                    _add(again, part.buckets.items())
                segments[0] = _Segment(watermark, cut.through, again)
            kept.watermark, kept.segments = watermark, segments
        settled = max(horizon, watermark)
        if settled > kept.covered:
            for segment in self._map(pages(kept.covered, settled)):
                kept.segments.append(segment)
                if len(kept.segments) > SEGMENTS:
                    kept.segments = _merged(kept.segments)
            kept.covered = settled
        for segment in kept.segments:
            _add(self.buckets, segment.buckets.items())
        for segment in self._map(pages(kept.covered, None)):  # not settled: this query only
            _add(self.buckets, segment.buckets.items())
        if kept.nbytes() > self.limit:
            kept.reset(watermark)  # more than the cache may hold: answer, keep nothing

    def window(self, start: int | None, end: int | None) -> Iterator[tuple[int, int, np.ndarray]]:
        """(time bucket, reports, statistic) of the tail's buckets with start <= time < end."""
        for time, (n, state) in sorted(self.buckets.items()):
            if (start is None or time >= start) and (end is None or time < end):
                yield time, n, state


def _merged(segments: list[_Segment]) -> list[_Segment]:
    """Neighbouring segments merged in pairs: half as many, each covering twice as much."""
    merged = []
    for first in range(0, len(segments), 2):
        pair = segments[first:first + 2]
        buckets: Buckets = {}
        for segment in pair:
            _add(buckets, segment.buckets.items())
        merged.append(_Segment(pair[0].after, pair[-1].through, buckets))
    return merged


@contextlib.contextmanager
def read_tail(storage: Storage, stored: StoredCampaign, *,
              limit: int = CACHE_BYTES) -> Iterator[TailRead]:
    """``with read_tail(storage, stored) as tail: storage.bucket_snapshot(..., tail)``: the
    campaign's kept tail, held by this query while it reads and extends it."""
    cache = _cache(storage)
    kept = cache.campaign(stored.id)
    try:
        with kept.lock:
            yield TailRead(storage, kept, limit)
    finally:
        cache.trim(limit)


@dataclass(frozen=True)
class EstimateInputs:
    """What an estimate of one window is computed from."""

    n: int
    state: np.ndarray
    unfolded: int  # of the n reports, those past the watermark (the tail's, in the window)
    folded_at: float | None  # when the statistics were last folded (None: never)

    def freshness(self) -> dict[str, Any]:
        return {"folded_at": self.folded_at, "unfolded_reports": self.unfolded}


def estimate_inputs(storage: Storage, stored: StoredCampaign, start: int | None,
                    end: int | None) -> EstimateInputs:
    """The window's folded statistics plus its unfolded tail, in one snapshot: complete at
    once, in memory bounded whatever the tail's length."""
    mechanism = stored.campaign.mechanism
    size = estimator_for(mechanism.name).state_size(mechanism)
    with read_tail(storage, stored) as tail:
        snapshot = storage.window_snapshot(stored.id, size, start, end, tail)
    state, unfolded = snapshot.state, 0
    for _, n, partial in tail.window(start, end):
        state = state + partial
        unfolded += n
    return EstimateInputs(snapshot.n + unfolded, state, unfolded, snapshot.folded_at)
