"""Forwarding shuffled batches from the shuffler's pool to the collector.

One pass (:meth:`Forwarder.flush`): first the batches claimed earlier and never acknowledged
(a crash or a failed forward), then every group that has reached ``MIN_BATCH``. Each batch is
shuffled with the OS CSPRNG, POSTed to the collector's ``/v1/reports`` with the shuffler key
and ``Chorus-Shuffled-Batch: <size>`` (with admission control also
``Chorus-Shuffled-Senders: <distinct admitted senders>``, a count only), and deleted from the
pool only after the collector's 200. A crash between the collector's commit and the delete
sends the same batch again; the collector counts its reports as duplicates, so nothing is
lost and nothing counted twice.

A 413 (the batch is over the collector's ``MAX_BODY_BYTES`` or ``MAX_REPORTS_PER_REQUEST``,
or its proxy's body limit) splits the batch in two halves, each of at least ``MIN_BATCH``
senders, and forwards each (a half refused again splits again). A batch too small to split
is kept: logged once as an error, counted in ``/healthz``, and tried again after a back-off
(:data:`HOLD_BACKOFF`) rather than on every pass; ``POST /v1/flush`` tries it at once.

Only one pass runs at a time per pool, across threads and processes (gunicorn workers): a
thread lock, then an exclusive ``flock`` on ``<database>.forward-lock``, which the OS releases
if the process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import requests

from chorus_client.transport import Response
from chorus_collector.ingest.shuffled_batches import SHUFFLED_BATCH_HEADER, SHUFFLED_SENDERS_HEADER
from chorus_collector.shuffler.pool import ShufflerPool, batch_body

__all__ = ["HOLD_BACKOFF", "SHUFFLED_BATCH_HEADER", "SHUFFLED_SENDERS_HEADER",
           "BackgroundForwarder", "FlushReport", "Forwarder", "RequestsUpstream", "Upstream",
           "UpstreamError", "UpstreamReply"]

USER_AGENT = "chorus-shuffler"
# Seconds before a batch the collector refused as too large, and that cannot be split, is
# tried again: one minute, doubling up to an hour. Only a change of settings lets it through,
# so trying every pass would only load the collector (and fill its log).
HOLD_BACKOFF = (60.0, 3600.0)

log = logging.getLogger("chorus.shuffler")


# The collector's answer: the client library's Response (status, body, headers).
UpstreamReply = Response


class UpstreamError(Exception):
    """No answer came from the collector (connection refused, timeout…)."""


class Upstream(Protocol):
    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> UpstreamReply:
        """Send one request to the collector; raise :class:`UpstreamError` if none answered."""
        ...


class RequestsUpstream:
    """HTTP with ``requests``, one session per request: no cookie jar carries anything over,
    and only the headers given are sent (plus requests' own Host and Content-Length)."""

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> UpstreamReply:
        try:
            reply = requests.request(method, url, data=body, headers=dict(headers),
                                     timeout=timeout, allow_redirects=False)
        except requests.RequestException as error:
            raise UpstreamError(f"{method} {url} failed: {error}") from error
        return UpstreamReply(reply.status_code, reply.content, dict(reply.headers))


@dataclass
class FlushReport:
    """What one forwarding pass did."""

    batches: int = 0  # acknowledged by the collector and removed from the pool
    reports: int = 0
    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    failed: int = 0  # batches the collector did not acknowledge; kept for the next pass
    split: int = 0  # batches the collector refused as too large, split in two halves
    held: int = 0  # too large and too small to split: kept (refused now, or backing off)
    busy: bool = False  # another pass held the lock; this one did nothing

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Forwarder:
    def __init__(self, pool: ShufflerPool, *, collector_url: str, key: str, min_batch: int,
                 max_batch: int, timeout: float, max_batch_bytes: int | None = None,
                 upstream: Upstream | None = None, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.pool = pool
        self.url = collector_url.rstrip("/") + "/v1/reports"
        self._key = key
        self.min_batch = min_batch
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.timeout = timeout
        self.clock = clock  # wall clock: a held batch's next try survives a restart
        self.upstream: Upstream = upstream or RequestsUpstream()
        # The OS CSPRNG; tests may pass a seeded generator to make a statistical test exact.
        self.rng: random.Random = rng or secrets.SystemRandom()
        self._lock = threading.Lock()
        self._lock_path = pool.path + ".forward-lock"

    def __repr__(self) -> str:
        return f"Forwarder({self.url!r}, min_batch={self.min_batch}, <key>)"

    @contextlib.contextmanager
    def _exclusive(self, wait: bool) -> Iterator[bool]:
        if not self._lock.acquire(blocking=wait, timeout=-1 if not wait else 600):
            yield False
            return
        try:
            with open(self._lock_path, "a") as handle:
                flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
                try:
                    fcntl.flock(handle, flags)
                except BlockingIOError:
                    yield False
                    return
                try:
                    yield True
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            self._lock.release()

    def flush(self, *, wait: bool = True, retry_held: bool = False) -> FlushReport:
        """One forwarding pass; ``wait=False`` returns at once if another pass is running.
        ``retry_held`` also tries the held batches whose back-off has not run out (an
        operator's flush, after raising the collector's limit)."""
        report = FlushReport()
        with self._exclusive(wait) as locked:
            if not locked:
                report.busy = True
                return report
            backing_off = set() if retry_held else self.pool.backing_off(self.clock())
            report.held += len(backing_off)
            for batch in self.pool.claimed_batches():
                if batch in backing_off:
                    continue
                if not self._forward(batch, report):
                    return report  # the collector is unreachable: try again next pass
            for batch in self.pool.claim(self.min_batch, self.max_batch, self.max_batch_bytes):
                if not self._forward(batch, report):
                    return report
        return report

    def _forward(self, batch: str, report: FlushReport) -> bool:
        """Send one batch; False when the collector is unreachable or failing (stop the pass)."""
        members = self.pool.batch(batch)
        if not members:
            return True
        senders = self.pool.batch_senders(batch)
        self.rng.shuffle(members)
        body = batch_body(members)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._key}",
                   SHUFFLED_BATCH_HEADER: str(len(members)), "User-Agent": USER_AGENT}
        if senders is not None:
            # Only a count: which report came from which sender never leaves the pool.
            headers[SHUFFLED_SENDERS_HEADER] = str(senders)
        try:
            reply = self.upstream.request("POST", self.url, body=body, headers=headers,
                                          timeout=self.timeout)
        except UpstreamError as error:
            log.warning("forward of a batch of %d reports failed, kept: %s", len(members), error)
            report.failed += 1
            return False
        if reply.status == 413:
            return self._too_large(batch, len(members), len(body), reply, report)
        statuses = _statuses(reply, len(members))
        if statuses is None:
            report.failed += 1
            log.warning("collector answered %d to a batch of %d reports, kept: %s",
                        reply.status, len(members), reply.body[:300].decode(errors="replace"))
            # 429 and 5xx: the collector is busy or down; stop. Other 4xx concern this batch
            # (a wrong key, say): go on with the others.
            return reply.status < 500 and reply.status != 429
        self.pool.delete(batch)  # only now: the collector has committed the batch
        report.batches += 1
        report.reports += len(members)
        for name in ("accepted", "duplicate", "rejected"):
            setattr(report, name, getattr(report, name) + statuses.get(name, 0))
        if reply.header(SHUFFLED_BATCH_HEADER) is None:
            log.error("the collector took a batch of %d reports but did not record it as "
                      "shuffled: its CHORUS_SHUFFLER_KEY differs from this shuffler's key, so "
                      "these reports count as sent directly", len(members))
        elif senders is not None and reply.header(SHUFFLED_SENDERS_HEADER) is None:
            log.error("the collector recorded a batch of %d reports from %d admitted senders "
                      "without their count (an older collector?): it will state its central "
                      "bound as assuming no injected reports", len(members), senders)
        if statuses.get("rejected"):
            log.warning("collector rejected %d of a batch of %d reports (expired, unknown "
                        "campaign or invalid payload); they are dropped",
                        statuses["rejected"], len(members))
        log.info("forwarded a shuffled batch of %d reports", len(members))
        return True

    def _too_large(self, batch: str, size: int, body_bytes: int, reply: UpstreamReply,
                   report: FlushReport) -> bool:
        """The collector (or its proxy) refused the batch as too large: forward it in two
        halves, each still of ``min_batch`` senders, or keep it whole when it cannot be split.
        False when a half met an unreachable or failing collector (stop the pass)."""
        halves = self.pool.split(batch, self.min_batch)
        if halves:
            report.split += 1
            log.info("the collector refused a batch of %d reports (%d bytes) as too large; "
                     "forwarding it in two halves", size, body_bytes)
            return all(self._forward(half, report) for half in halves)
        report.failed += 1
        report.held += 1
        refusals, retry_at = self.pool.hold(batch, reports=size, size=body_bytes,
                                            now=self.clock(), backoff=HOLD_BACKOFF)
        if refusals == 1:  # once per batch, whichever worker or restart meets it first
            detail = reply.body[:300].decode(errors="replace")
            log.error("the collector refused a batch of %d reports (%d bytes) as too large "
                      "(%s), and it cannot be split: each half would have fewer than "
                      "MIN_BATCH = %d senders (without admission: reports). The reports are "
                      "kept and the batch is tried again after a back-off (POST /v1/flush: at "
                      "once). Raise the "
                      "collector's CHORUS_MAX_BODY_BYTES (and CHORUS_MAX_REPORTS_PER_REQUEST, "
                      "and its proxy's client_max_body_size) above %d bytes, or lower this "
                      "shuffler's CHORUS_SHUFFLER_MIN_BATCH (and CHORUS_SHUFFLER_MAX_BATCH, "
                      "CHORUS_SHUFFLER_MAX_BATCH_BYTES) for the batches to come",
                      size, body_bytes, detail, self.min_batch, body_bytes)
        else:
            log.debug("a held batch of %d reports was refused as too large again (%d times); "
                      "next try in %.0f s", size, refusals, retry_at - self.clock())
        return True  # the collector answers; go on with the other batches


def _statuses(reply: UpstreamReply, size: int) -> dict[str, int] | None:
    """Counts of the collector's per-report answers, or None unless it took the batch."""
    if reply.status != 200:
        return None
    try:
        results = json.loads(reply.body).get("results")
    except (ValueError, AttributeError):
        return None
    if not isinstance(results, list) or len(results) != size:
        return None
    counts: dict[str, int] = {}
    for result in results:
        status = result.get("status") if isinstance(result, dict) else None
        counts[str(status)] = counts.get(str(status), 0) + 1
    return counts


class BackgroundForwarder:
    """A daemon thread that runs a pass every ``interval`` seconds until stopped."""

    def __init__(self, forwarder: Forwarder, interval: float) -> None:
        self.forwarder = forwarder
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="chorus-shuffler-forward",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.forwarder.flush(wait=False)
            except Exception:  # keep forwarding after any one failure; the pool is intact
                log.exception("forwarding pass failed")

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
