"""Whether this process finds its database out of reach, and one log line when that starts and
one when it ends.

A database that is stopped, restarting, full or locked fails every request the same way: a
traceback per request would bury the one line that matters (308 of them in 15 s, measured on
PostgreSQL). Requests answer ``503 storage-unavailable`` with ``Retry-After`` meanwhile; the
engines say which errors are outages (``Storage.unavailable``) and when the database answers
again (``Outage.up``).
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["Outage"]

log = logging.getLogger("chorus.storage")


class Outage:
    """An outage as one process sees it: started by the first failure, ended by the first
    success after it; each logged once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failures = 0

    @property
    def out(self) -> bool:
        return self._since is not None

    def down(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        log.error("storage unavailable (%s: %s); answering 503 storage-unavailable until it "
                  "answers again", type(error).__name__, reason)

    def up(self) -> None:
        if self._since is None:  # the usual case: no lock taken
            return
        with self._lock:
            if self._since is None:
                return
            lasted, failures = time.monotonic() - self._since, self._failures
            self._since, self._failures = None, 0
        log.warning("storage available again after %.1f s (%d requests or jobs refused "
                    "meanwhile)", lasted, failures)
