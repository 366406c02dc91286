"""The fold lease: which folder folds now, kept short by a heartbeat and given back on stop.

Several folders share one database (each server worker, every replica, ``chorus aggregate``,
a Dask fold). The lease in ``fold_state`` keeps all but one of them idle; it only saves
duplicate work, since ``commit_fold``'s watermark check is what keeps folds exact. So the
lease is kept short (``LEASE_SECONDS``) and renewed by a heartbeat thread while its holder
folds, and given back as soon as the holder stops (the fold ends, a graceful drain, SIGTERM,
interpreter exit). A holder killed outright (kill -9, OOM) cannot give it back:

* its lease runs out within ``LEASE_SECONDS``, for a folder on any host;
* a folder on the same host takes it at once: the holder's name carries its host and pid
  (``Holder``), and a pid with no live process behind it holds nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chorus_collector.storage import Storage

__all__ = ["LEASE_SECONDS", "FoldLease", "Holder", "process_gone"]

log = logging.getLogger("chorus.folding")

# Short, because nothing folds while a dead holder's lease runs; renewed every third of it,
# so a holder that is merely slow (a long chunk, a busy database) keeps it.
LEASE_SECONDS = 10.0
HEARTBEATS_PER_LEASE = 3


@dataclass(frozen=True)
class Holder:
    """Who holds the lease, as stored: ``host:pid:role:token`` (the token tells apart two
    folders of one process)."""

    host: str
    pid: int
    role: str  # "folder" (a server worker), "aggregate" (the command), "dask"
    token: str

    @classmethod
    def here(cls, role: str) -> Holder:
        return cls(socket.gethostname(), os.getpid(), role, uuid.uuid4().hex[:12])

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        """The holder a stored name gives (None: none, or a name from before host and pid
        were part of it)."""
        parts = (text or "").split(":")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.role}:{self.token}"

    def describe(self) -> str:
        what = {"folder": "a server's folder", "aggregate": "chorus aggregate",
                "dask": "chorus aggregate --scheduler"}.get(self.role, self.role)
        return f"{what} (pid {self.pid} on {self.host})"


def process_gone(holder: Holder) -> bool:
    """Whether ``holder``'s process has certainly ended. Only a process on this host can be
    checked; anything uncertain (another host, another user's process, this process) counts
    as alive, and then the lease runs out on its own."""
    if holder.host != socket.gethostname() or holder.pid == os.getpid():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # a live process of another user (or a reused pid): wait for expiry
    # Killed but not yet reaped by its parent: a zombie folds nothing.
    try:
        stat = Path(f"/proc/{holder.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] in (["Z"], ["X"])


class FoldLease:
    """This process's claim on the fold lease under one role; ``with lease.hold() as held:``.

    The holder's name is made per process, so a lease object created before a fork (the
    server's master) gets a name of its own in each worker.
    """

    def __init__(self, storage: Storage, role: str, *, clock: Callable[[], float] = time.time,
                 seconds: float = LEASE_SECONDS) -> None:
        self.storage = storage
        self.role = role
        self.clock = clock
        self.seconds = seconds
        self._holder: Holder | None = None
        self._lock = threading.Lock()  # a renewal and the release never interleave
        self._holding = False
        self._closed = False
        self.lost = threading.Event()  # set when a renewal found the lease taken

    @property
    def holder(self) -> str:
        if self._holder is None or self._holder.pid != os.getpid():
            self._holder = Holder.here(self.role)
        return str(self._holder)

    def claim(self) -> bool:
        """Take the lease if it is free, ours, run out, or held by a process that is gone."""
        with self._lock:
            if self._closed:
                return False
            now = self.clock()
            try:
                taken = self.storage.claim_fold(self.holder, now, self.seconds)
                if not taken:
                    state = self.storage.fold_lease()
                    other = Holder.parse(state.holder)
                    if other is not None and state.until >= now and process_gone(other):
                        taken = self.storage.claim_fold(self.holder, now, self.seconds,
                                                        replacing=state.holder)
                        if taken:
                            log.warning("took the fold lease of %s: that process is gone",
                                        other.describe())
            except BaseException:
                # Unwound (SIGTERM's SystemExit) perhaps after the claim committed: count
                # it as held, so that it is given back (releasing a lease another holder
                # has changes nothing).
                self._holding = True
                raise
            self._holding = self._holding or taken
            if taken:
                self.lost.clear()
            return taken

    def renew(self) -> bool:
        """Extend the lease we hold; False (and ``lost`` set) if another holder has it now."""
        with self._lock:
            if self._closed or not self._holding:
                return False
            if self.storage.claim_fold(self.holder, self.clock(), self.seconds):
                return True
            self._holding = False
            self.lost.set()
            return False

    def release(self) -> None:
        """Give the lease back, if this process holds it."""
        with self._lock:
            if self._holding:
                # Marked given back only once it is: if this fails (a thread's connection
                # torn down at interpreter exit), ``close`` from another thread tries again.
                self.storage.release_fold(self.holder)
                self._holding = False

    def close(self) -> None:
        """Release for good: this lease is never claimed or renewed again (a stopping
        folder, whose fold thread may still be finishing a chunk)."""
        with self._lock:
            self._closed = True
        self.release()

    @contextlib.contextmanager
    def hold(self) -> Iterator[bool]:
        """Claim the lease; if it was taken, keep it by a heartbeat until the block ends
        (however it ends: an exception, SystemExit), then give it back."""
        try:
            claimed = self.claim()
        except BaseException:
            self._release_after_unwinding()
            raise
        if not claimed:
            yield False
            return
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True,
                                name="chorus-fold-lease")
        try:  # from here on the lease is ours to give back, however this unwinds
            beat.start()
            yield True
        except BaseException:
            stop.set()
            if beat.ident is not None:
                beat.join(self.seconds)
            self._release_after_unwinding()
            raise
        stop.set()
        beat.join(self.seconds)
        self.release()

    def _release_after_unwinding(self) -> None:
        # What unwound the fold (SIGTERM's SystemExit, Ctrl-C) may have landed in the middle
        # of a driver call and left this thread's connection mid-transaction or
        # mid-pipeline: give the lease back on a fresh one.
        self.storage.close()
        self.release()

    def _heartbeat(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self.seconds / HEARTBEATS_PER_LEASE):
                try:
                    if not self.renew():
                        if self.lost.is_set():
                            log.warning("the fold lease was taken by another folder; this "
                                        "one stops after its chunk")
                        return
                except Exception:  # the next beat retries; the lease may run out meanwhile
                    log.exception("renewing the fold lease failed")
        finally:
            self.storage.close()  # this thread's connection
