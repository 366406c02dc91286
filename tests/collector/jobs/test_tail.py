"""A query's unfolded tail (issue 33 #8): read in pages of a bounded size, mapped once and kept
per campaign, exact through folds, appends and appends still in flight, on both engines.

Regression: every estimate read ``SELECT time, payload FROM reports …`` whole with
``fetchall()`` and mapped it, so 10⁶ unfolded OLH reports cost +269 MB and 20 s per query.
"""

from __future__ import annotations

import gc
import json
import secrets
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.jobs.folding import fold, fold_once
from chorus_collector.jobs.tail import EstimateInputs, estimate_inputs, read_tail
from chorus_collector.storage import Storage, StoredCampaign, StoredReport, TailPages, open_storage
from chorus_shared import campaign_from_spec
from helpers.support import campaign_spec

HOUR = 3600
ENGINES = [pytest.param("sqlite", marks=pytest.mark.sqlite_only), "postgresql"]


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A new database of each engine (a real PostgreSQL server: it never skips)."""
    url = (str(tmp_path / "chorus.db") if request.param == "sqlite"
           else str(request.getfixturevalue("postgres").new_schema()))
    storage = open_storage(url)
    storage.migrate()
    yield storage
    storage.close()


def _olh(store: Storage, name: str = "olh") -> StoredCampaign:
    spec = campaign_spec(name, mechanism="krr")
    spec.update(mechanism="olh", epsilon=1.0, domain=[f"c{i}" for i in range(64)])
    stored, _ = store.insert_campaign(campaign_from_spec(spec, warn=False))
    return stored


def _append(store: Storage, stored: StoredCampaign, count: int, rng: np.random.Generator,
            hours: int = 4) -> None:
    """``count`` simulated reports over ``hours`` hourly buckets, appended as ingest does."""
    mechanism = stored.campaign.mechanism
    d = len(stored.campaign.config["domain"]["values"])
    payloads = simulate(mechanism, rng.integers(0, d, size=count), rng)
    times = (HOUR * (1 + rng.integers(0, hours, size=count))).tolist()
    with store.write() as conn:
        store.insert_reports(conn, stored.id, [
            StoredReport(secrets.token_bytes(16), int(t), json.dumps(p))
            for p, t in zip(payloads, times, strict=True)])


def _inputs(store: Storage, stored: StoredCampaign, start: int | None = None,
            end: int | None = None) -> tuple[EstimateInputs, int]:
    """(estimate inputs, reports this query mapped itself rather than reusing)."""
    mechanism = stored.campaign.mechanism
    size = estimator_for(mechanism.name).state_size(mechanism)
    with read_tail(store, stored) as tail:
        snapshot = store.window_snapshot(stored.id, size, start, end, tail)
    state, n = snapshot.state, snapshot.n
    for _, count, partial in tail.window(start, end):
        state, n = state + partial, n + count
    assert snapshot.tail == []  # the pages went to the reader, nothing was fetched whole
    return EstimateInputs(n, state, 0, None), tail.mapped


def _folded_truth(store: Storage, stored: StoredCampaign, start: int | None = None,
                  end: int | None = None) -> tuple[int, list[int]]:
    """What the window's statistics are once everything is folded (a fresh storage object:
    nothing kept)."""
    other = open_storage(store.path)
    try:
        fold(other)
        inputs = estimate_inputs(other, stored, start, end)
        assert inputs.unfolded == 0
        return inputs.n, inputs.state.tolist()
    finally:
        other.close()


class _CountingReader:
    """A TailReader that only counts what each page holds."""

    def __init__(self) -> None:
        self.pages: list[int] = []

    def read(self, watermark: int, horizon: int, pages: TailPages) -> None:
        for page in pages(watermark, None):
            assert page.after < page.through
            self.pages.append(sum(group.reports for group in page.groups))


def test_storage_hands_the_tail_over_in_pages_of_at_most_tail_page(store: Storage) -> None:
    stored = _olh(store)
    other = _olh(store, "other")  # its reports interleave: pages are per campaign
    rng = np.random.default_rng(1)
    for _ in range(3):
        _append(store, stored, 330, rng)
        _append(store, other, 100, rng)
    store.tail_page = 100
    reader = _CountingReader()
    snapshot = store.bucket_snapshot(stored.id, None, None, reader)
    assert snapshot.tail == [] and snapshot.buckets == []
    assert sum(reader.pages) == 990
    assert max(reader.pages) <= 100 and len(reader.pages) == 10


def test_the_tail_is_mapped_once_and_stays_exact_through_folds_and_appends(
        store: Storage) -> None:
    stored = _olh(store)
    rng = np.random.default_rng(2)
    _append(store, stored, 1_000, rng)
    store.tail_page = 50
    inputs, mapped = _inputs(store, stored)
    assert (inputs.n, mapped) == (1_000, 1_000)
    assert _inputs(store, stored)[1] == 0  # nothing new: nothing mapped again
    _append(store, stored, 37, rng)
    inputs, mapped = _inputs(store, stored)
    assert (inputs.n, mapped) == (1_037, 37)
    # A fold moves the watermark into the middle of a kept segment (the 11th of 50 reports):
    # only its 25 reports past the watermark are read again; nothing is lost or counted twice.
    assert fold_once(store, limit=525) == 525
    inputs, mapped = _inputs(store, stored, HOUR, 3 * HOUR)
    assert mapped == 25
    assert (inputs.n, inputs.state.tolist()) == _folded_truth(store, stored, HOUR, 3 * HOUR)
    # The fold passed everything kept: the tail starts over from the new watermark.
    _append(store, stored, 3, rng)
    inputs, mapped = _inputs(store, stored)
    assert (inputs.n, mapped) == (1_040, 3)


def test_a_query_does_not_wait_for_appends_in_flight_nor_keeps_what_they_may_precede(
        store: Storage) -> None:
    """Probe: an append holds its transaction open while a later one commits (PostgreSQL's
    appenders overlap; SQLite's take turns, so there the second waits for the first). The
    query answers meanwhile without waiting, with what has committed, and the next one counts
    both once."""
    stored = _olh(store)
    rng = np.random.default_rng(3)
    _append(store, stored, 200, rng)
    assert _inputs(store, stored)[0].n == 200
    appending, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_append() -> None:
        try:
            with store.write() as conn:
                store.insert_reports(conn, stored.id, [
                    StoredReport(secrets.token_bytes(16), HOUR, json.dumps(p)) for p in
                    simulate(stored.campaign.mechanism, np.zeros(5, dtype=np.int64), rng)])
                appending.set()
                assert release.wait(60)
        except BaseException as error:  # raised again in the test's thread
            errors.append(error)
        finally:
            store.close()
            appending.set()

    writer = threading.Thread(target=slow_append)
    writer.start()
    try:
        assert appending.wait(60)
        concurrent = store.path.startswith("postgres")
        if concurrent:
            _append(store, stored, 7, rng)  # a later seq, committed first
        answers: list[int] = []
        reader = threading.Thread(target=lambda: answers.append(_inputs(store, stored)[0].n))
        reader.start()
        reader.join(60)  # a deadlock guard only: the query takes no append lock
        assert answers == [207 if concurrent else 200]
    finally:
        release.set()
        writer.join(60)
    assert not errors
    if not concurrent:
        _append(store, stored, 7, rng)
    inputs, _ = _inputs(store, stored)
    assert (inputs.n, inputs.state.tolist()) == _folded_truth(store, stored) \
        and inputs.n == 212


def _peak_bytes(store: Storage, stored: StoredCampaign) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        with read_tail(store, stored, limit=0) as tail:  # keep nothing: every query maps
            store.window_snapshot(stored.id, 1, None, None, tail)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_querys_memory_does_not_grow_with_the_tail(store: Storage) -> None:
    """Peak Python memory of a query over 10,000 unfolded reports and over 40,000 is about the
    same: the tail is read in pages of at most ``tail_page`` reports and kept in at most
    SEGMENTS segments (before, the whole tail was fetched as rows first: O(tail))."""
    store.tail_page = 250
    rng = np.random.default_rng(4)
    small, large = _olh(store, "small"), _olh(store, "large")
    for _ in range(2):
        _append(store, small, 5_000, rng)
    for _ in range(8):
        _append(store, large, 5_000, rng)
    peaks: dict[str, Any] = {}
    for name, stored in (("small", small), ("large", large)):
        _peak_bytes(store, stored)  # warm: campaign caches, the connection, statements
        peaks[name] = _peak_bytes(store, stored)
    payload_bytes = sum(len(p) for _, p in store.window_snapshot(large.id, 1, None, None).tail)
    assert peaks["large"] < 1.25 * peaks["small"], peaks
    assert peaks["large"] < payload_bytes / 4, (peaks, payload_bytes)
