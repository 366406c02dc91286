"""The fold lease when real folders stop (issue 33 #5), on the suite's backend.

A database holds reports whose fold takes several chunks (a wide OLH domain makes the map
slow: about a second a chunk). Then:

* ``chorus serve`` is stopped with SIGTERM while a worker folds: the worker finishes the chunk
  in hand and gives the lease back on its way out (before, it kept it for two minutes);
* ``chorus aggregate`` is stopped with SIGTERM mid-fold: the same;
* ``chorus aggregate`` is killed with SIGKILL mid-fold, so it cannot give the lease back: the
  next ``chorus aggregate`` on this host sees the holder's process is gone, takes the lease
  at once and folds everything, and the statistics equal a recount of the reports.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chorus_collector.ingest.reports import ingest_reports
from chorus_collector.jobs.aggregate import check_aggregates
from chorus_collector.jobs.folding import FOLD_CHUNK, fold
from chorus_collector.jobs.lease import Holder
from chorus_collector.jobs.tail import estimate_inputs
from chorus_collector.server.process import CollectorProcess
from chorus_collector.storage import FoldLeaseState, Storage, open_storage
from chorus_shared import campaign_from_spec
from chorus_shared.wire import new_report
from helpers.support import ADMIN

pytestmark = pytest.mark.slow
DOMAIN = 20_000
REPORTS = 3 * FOLD_CHUNK
CHORUS = str(Path(sys.executable).with_name("chorus"))


@pytest.fixture
def slow_fold(database: str) -> Storage:
    """A database with REPORTS unfolded reports of an OLH campaign over DOMAIN values."""
    storage = open_storage(database)
    storage.migrate()
    campaign = campaign_from_spec({"name": "slow", "mechanism": "olh", "epsilon": 2.0,
                                   "domain": [f"v{i}" for i in range(DOMAIN)],
                                   "min_batch_size": 1})
    storage.insert_campaign(campaign)
    mechanism = campaign.mechanism
    rng = random.Random(33)
    now = time.time()
    for _ in range(REPORTS // 5000):
        reports = [new_report(campaign, mechanism.randomize(
            mechanism.encode(f"v{rng.randrange(DOMAIN)}"), rng), now).to_json()
            for _ in range(5000)]
        assert {s.status for s in ingest_reports(storage, reports, now)} == {"accepted"}
    assert storage.fold_status().unfolded == REPORTS
    return storage


def _holding(storage: Storage, role: str, timeout: float = 60) -> Holder:
    """The holder of the fold lease, once a folder of ``role`` holds it (bounded in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lease = storage.fold_lease()
        holder = Holder.parse(lease.holder)
        if holder is not None and holder.role == role and lease.until > time.time():
            return holder
        time.sleep(0.02)
    raise AssertionError(f"no {role} took the fold lease within {timeout} s")


def _exact(storage: Storage) -> None:
    """The folded statistics are a recount of the reports below the watermark, and with the
    unfolded tail every report counts exactly once."""
    checks = check_aggregates(storage, "slow", workers=1)  # none before the first commit
    assert all(check.matches for check in checks)
    stored = storage.get_campaign("slow")
    assert stored is not None
    assert estimate_inputs(storage, stored, None, None).n == REPORTS


def _aggregate(database: str) -> subprocess.Popen[str]:
    return subprocess.Popen([CHORUS, "aggregate", "--database", database],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_to_a_server_mid_fold_gives_the_lease_back(slow_fold: Storage,
                                                           database: str) -> None:
    server = CollectorProcess(database, settings={
        "ADMIN_TOKEN": ADMIN, "WORKERS": "2", "FOLD_INTERVAL": "1"})
    server.start()
    try:
        holder = _holding(slow_fold, "folder")
        assert holder.host == socket.gethostname() and holder.pid != server.process.pid  # type: ignore[union-attr]
    finally:
        code = server.stop(signal.SIGTERM)
    assert code == 0, server.log()[-3000:]
    lease = slow_fold.fold_lease()
    assert lease.until == 0, f"{lease.holder} kept the lease, {lease.until - time.time():.0f} s"
    assert Holder.parse(lease.holder) is not None
    status = slow_fold.fold_status()
    assert status.unfolded > 0  # stopped between chunks, before the fold was done
    _exact(slow_fold)
    assert fold(slow_fold) == status.unfolded  # nobody holds it: folding goes on at once
    _exact(slow_fold)


def test_sigterm_to_chorus_aggregate_mid_fold_gives_the_lease_back(slow_fold: Storage,
                                                                   database: str) -> None:
    command = _aggregate(database)
    try:
        holder = _holding(slow_fold, "aggregate")
        assert holder.pid == command.pid
        command.send_signal(signal.SIGTERM)
        code = command.wait(60)
    finally:
        if command.poll() is None:
            command.kill()
        _, stderr = command.communicate(timeout=30)
    assert code == 128 + signal.SIGTERM, stderr[-3000:]
    assert slow_fold.fold_lease() == FoldLeaseState(str(holder), 0.0), stderr[-3000:]
    assert slow_fold.fold_status().unfolded > 0
    _exact(slow_fold)


def test_kill_9_of_chorus_aggregate_mid_fold_then_the_next_one_folds_everything(
        slow_fold: Storage, database: str) -> None:
    command = _aggregate(database)
    try:
        holder = _holding(slow_fold, "aggregate")
        assert holder.pid == command.pid
        command.kill()  # SIGKILL: no handler, no atexit, the lease stays behind
    finally:
        command.communicate(timeout=30)
    assert slow_fold.fold_lease().holder == str(holder)
    left = slow_fold.fold_status().unfolded
    assert left > 0
    _exact(slow_fold)
    attempts = []
    for _ in range(3):  # bounded: the first one is expected to do it
        again = _aggregate(database)
        output, errors = again.communicate(timeout=300)
        assert again.returncode == 0, errors
        attempts.append(output.strip())
        if slow_fold.fold_status().unfolded == 0:
            break
    assert attempts == [f"folded {left:,} reports; 0 waiting"]  # no wait for the dead lease
    assert slow_fold.fold_lease().until == 0
    _exact(slow_fold)
    folded = slow_fold.folded_statistics(slow_fold.get_campaign("slow").id)  # type: ignore[union-attr]
    assert sum(n for _, n, _ in folded.buckets) == REPORTS  # nothing folded twice
