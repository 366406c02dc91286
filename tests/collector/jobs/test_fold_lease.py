"""The fold lease (issue 33 #5): short, renewed by a heartbeat while a folder folds, given back
whenever a folder stops, and taken at once from a holder whose process is gone.

Real storage on the suite's backend and real processes (a child that exited, a zombie, a live
one); the kill -9 and SIGTERM of real servers and commands are in tests/e2e/test_fold_lease_e2e.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask

from chorus_collector.cli import main as cli
from chorus_collector.jobs.folding import BackgroundFolder
from chorus_collector.jobs.lease import LEASE_SECONDS, FoldLease, Holder, process_gone
from chorus_collector.storage import FoldLeaseState, Storage, open_storage
from helpers.support import ADMIN_HEADERS, FakeClock, make_report


@pytest.fixture
def storage(make_app: Callable[..., Flask], clock: FakeClock, database: str) -> Storage:
    """240 unfolded reports of one campaign."""
    http = make_app().test_client()
    config = http.post("/v1/campaigns", json={
        "name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"],
        "min_batch_size": 1}, headers=ADMIN_HEADERS).get_json()
    import random

    rng = random.Random(3)
    reports = [make_report(config, rng.choice("abc"), rng) for _ in range(240)]
    assert http.post("/v1/reports", json={"reports": reports}).get_json()["accepted"] == 240
    return open_storage(database)


@pytest.fixture
def exited_pid() -> int:
    """The pid of a process of this host that has ended (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    return child.pid


@pytest.fixture
def live_child() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)


def _holder(pid: int, host: str | None = None, role: str = "aggregate") -> str:
    return str(Holder(host or socket.gethostname(), pid, role, "0123456789ab"))


def test_a_holder_is_named_by_host_and_pid_and_old_names_are_opaque() -> None:
    here = Holder.here("folder")
    assert (here.host, here.pid, here.role) == (socket.gethostname(), os.getpid(), "folder")
    assert Holder.parse(str(here)) == here
    assert "pid" in here.describe() and here.host in here.describe()
    # Before this change a holder was a bare uuid: it is nobody's process, so it waits out
    # its lease.
    assert Holder.parse("4f1c2b0e9d8a7c6b5a4f3e2d1c0b9a88") is None
    assert Holder.parse(None) is None


def test_a_dead_local_holder_loses_its_lease_at_once(storage: Storage, exited_pid: int) -> None:
    dead = _holder(exited_pid)
    assert process_gone(Holder.parse(dead))  # type: ignore[arg-type]
    assert storage.claim_fold(dead, now=time.time(), lease=3600.0)  # as a kill -9 leaves it
    lease = FoldLease(storage, "folder")
    assert lease.claim()  # long before the hour is up
    assert storage.fold_lease().holder == lease.holder
    lease.release()
    assert storage.fold_lease() == FoldLeaseState(lease.holder, 0.0)


def test_a_zombie_holds_nothing(storage: Storage) -> None:
    """Killed but not yet reaped by its parent: the pid still exists, the folder does not."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        child.send_signal(signal.SIGKILL)
        stat = Path(f"/proc/{child.pid}/stat")
        deadline = time.monotonic() + 30
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert storage.claim_fold(_holder(child.pid), now=time.time(), lease=3600.0)
        assert FoldLease(storage, "folder").claim()
    finally:
        child.wait(30)


def test_live_holders_and_holders_elsewhere_keep_their_lease_until_it_runs_out(
        storage: Storage, live_child: subprocess.Popen[bytes], exited_pid: int,
        clock: FakeClock) -> None:
    lease = FoldLease(storage, "folder", clock=clock)
    for other in (_holder(live_child.pid),  # alive on this host
                  _holder(exited_pid, host="another-host"),  # cannot be checked from here
                  _holder(os.getpid())):  # another folder of this very process
        assert storage.claim_fold(other, now=clock(), lease=LEASE_SECONDS)
        assert not lease.claim()
        assert BackgroundFolder(storage, 1, clock=clock).run_once() == 0
        clock.now += LEASE_SECONDS + 1  # … then it runs out, for a folder on any host
        assert lease.claim()
        lease.release()


def test_the_heartbeat_keeps_the_lease_while_the_fold_runs_and_gives_it_back(
        storage: Storage) -> None:
    lease = FoldLease(storage, "folder", seconds=0.6)
    with lease.hold() as held:
        assert held
        first = storage.fold_lease().until
        deadline = time.monotonic() + 30
        while storage.fold_lease().until <= first:  # renewed by the heartbeat thread
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.05)
        assert storage.fold_lease().holder == lease.holder
    assert storage.fold_lease().until == 0  # given back at the end of the block
    assert not lease.lost.is_set()


def test_a_fold_that_loses_its_lease_stops_between_chunks(storage: Storage,
                                                          exited_pid: int) -> None:
    lease = FoldLease(storage, "folder", seconds=3600.0)
    with lease.hold() as held:
        assert held
        assert storage.claim_fold(_holder(exited_pid, host="another-host"), time.time(),
                                  3600.0, replacing=lease.holder)  # taken over meanwhile
        assert not lease.renew()
        assert lease.lost.is_set()
    # Not ours any more: the release leaves the new holder's lease alone.
    assert storage.fold_lease().holder == _holder(exited_pid, host="another-host")


@pytest.mark.parametrize("ending", [SystemExit(143), KeyboardInterrupt(), RuntimeError("db")])
def test_a_fold_interrupted_in_any_way_gives_the_lease_back(
        storage: Storage, monkeypatch: pytest.MonkeyPatch, ending: BaseException) -> None:
    """SIGTERM to ``chorus aggregate`` is a SystemExit, Ctrl-C a KeyboardInterrupt."""
    def interrupted(*args: object, **kwargs: object) -> bool:
        raise ending

    folder = BackgroundFolder(storage, 1)
    monkeypatch.setattr(storage, "commit_fold", interrupted)
    with pytest.raises(type(ending)):
        folder.run_once()
    assert storage.fold_lease() == FoldLeaseState(folder.lease.holder, 0.0)
    monkeypatch.undo()
    assert BackgroundFolder(storage, 1).run_once() == 240  # and the next folder goes on


def test_a_stopped_folder_gives_the_lease_back_and_never_claims_again(
        storage: Storage) -> None:
    folder = BackgroundFolder(storage, 3600)  # started, but its first round is an hour away
    folder.start()
    assert folder.lease.claim()  # as if stopped mid-fold
    folder.stop()
    assert storage.fold_lease().until == 0
    assert not folder.lease.claim()
    assert folder.run_once() == 0
    assert BackgroundFolder(storage, 1).run_once() == 240


def test_aggregate_says_who_holds_the_lease_and_until_when(storage: Storage,
                                                          live_child: subprocess.Popen[
                                                              bytes]) -> None:
    assert storage.claim_fold(_holder(live_child.pid, role="folder"), time.time(), 600.0)
    result = CliRunner().invoke(cli, ["aggregate", "--database", storage.path])
    assert result.exit_code == 0, result.output
    assert "folded 0 reports; 240 waiting; the fold lease is held by a server's folder " \
           f"(pid {live_child.pid} on {socket.gethostname()}) until " in result.output
    assert "UTC (600 s from now)" in result.output or "UTC (599 s from now)" in result.output
    storage.release_fold(_holder(live_child.pid, role="folder"))
    result = CliRunner().invoke(cli, ["aggregate", "--database", storage.path])
    assert result.output.strip() == "folded 240 reports; 0 waiting"
