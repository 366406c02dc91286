"""The outbox's way out: due reports in batches of one campaign, retried byte for byte.

Reports leave only once due (a random moment after their time bucket, see ``send_delay``), in
requests that each carry one campaign, and leave the outbox only when the collector has
answered for them. A report is dropped (its ε stays spent) only when a Chorus problem document
says the report itself is bad; a proxy's error page, a 401, a 429 or a 5xx keeps it, and the
sender holds off as the collector asked (``Retry-After``) or by backoff.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chorus_client.errors import APIError, TransportError
from chorus_client.retry import RetryPolicy, retry_after, send_with_retries
from chorus_client.state import ClientState
from chorus_client.transport import Response, Transport
from chorus_shared.wire import PROBLEM_BASE, REFUSED_REPORT_KINDS

__all__ = ["FlushResult", "Sender"]

log = logging.getLogger("chorus.client")


@dataclass
class FlushResult:
    """What one :meth:`Client.flush` achieved."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    pending: int = 0  # still in the outbox afterwards (not due, or the collector unreachable)


def refuses_the_reports(response: Response) -> bool:
    """Whether the answer is a Chorus problem document saying the reports themselves are bad.

    Only then is a batch dropped (its ε stays spent): a 400 from a proxy, a captive portal or
    a load balancer, with an HTML body, says nothing about the reports.
    """
    media_type = (response.header("Content-Type") or "").split(";")[0].strip().lower()
    problem = response.json_object() if media_type == "application/problem+json" else None
    kind = str((problem or {}).get("type", ""))
    return kind.startswith(PROBLEM_BASE) and kind[len(PROBLEM_BASE):] in REFUSED_REPORT_KINDS


class Sender:
    """Sends the outbox's due reports, on the app's :meth:`flush` or in a daemon thread.

    ``before_round`` runs at the start of every round (the config fetches that are due), and
    ``next_fetch`` tells the background thread when it next has one to make.
    """

    def __init__(self, *, url: str, transport: Transport, state: ClientState,
                 headers: Mapping[str, str], timeout: float, retry: RetryPolicy,
                 batch_size: int, clock: Callable[[], float], sleep: Callable[[float], None],
                 before_round: Callable[[], None],
                 next_fetch: Callable[[], float | None], sent_log: int = 0) -> None:
        self.url = url
        self.transport = transport
        self.headers = dict(headers)
        self.timeout = timeout
        self.retry = retry
        self.batch_size = batch_size
        self._state = state
        self._clock = clock
        self._sleep = sleep
        self._before_round = before_round
        self._next_fetch = next_fetch
        self.sent_log = sent_log  # answered reports kept for the app to show (0: none)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.hold_until = 0.0  # no sending before this (clock) time: Retry-After, backoff
        self._failures = 0
        self.dropped = 0  # reports the collector refused for good (logged, never retried)
        self.totals = FlushResult()  # everything acknowledged over this client's life
        self.wake = threading.Event()
        self._stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def pending(self) -> int:
        return self._state.outbox_size()

    def flush(self, deadline: float | None, sleep: Callable[[float], Any] | None = None, *,
              everything: bool = False) -> FlushResult:
        """Send due reports (all of them with ``everything``) until none is left, the
        collector cannot take more, or ``deadline`` (a ``time.monotonic()`` value)."""
        sleep = self._sleep if sleep is None else sleep
        result = FlushResult()
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._flush_lock.acquire(timeout=-1 if wait is None else wait):
            result.pending = self.pending()
            return result
        try:
            if not self._state.closed:
                self._before_round()
            size = self.batch_size
            while self._clock() >= self.hold_until and not self._state.closed:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                rows = self._state.outbox(size, math.inf if everything else self._clock())
                if not rows:
                    break
                # Read, then made durable, then sent: the charges of these rows committed
                # before they could be read, so none can be undone once they are sent.
                self._state.make_durable()
                sent = self._send_batch(rows, result, deadline, sleep)
                if sent == "split":
                    size = max(1, len(rows) // 2)
                elif sent != "done":
                    break
        finally:
            self._flush_lock.release()
        result.pending = self.pending()
        with self._lock:
            self.totals.accepted += result.accepted
            self.totals.duplicate += result.duplicate
            self.totals.rejected += result.rejected
            self.totals.pending = result.pending
        return result

    def _hold_off(self, seconds: float) -> None:
        with self._lock:
            self._failures += 1
            self.hold_until = self._clock() + seconds

    def _send_batch(self, rows: list[tuple[int, str]], result: FlushResult,
                    deadline: float | None, sleep: Callable[[float], Any]) -> str:
        """Send one batch: "done", "split" (too large: send halves) or "kept" (queued)."""
        body = ('{"reports":[' + ",".join(report for _, report in rows) + "]}").encode()
        try:
            response = send_with_retries(self.transport, "POST", f"{self.url}/v1/reports",
                                         body, self.headers, timeout=self.timeout,
                                         policy=self.retry, sleep=sleep, deadline=deadline)
        except TransportError as error:
            log.warning("chorus: collector unreachable, %d reports kept: %s", len(rows), error)
            self._hold_off(self.retry.delay(min(self._failures, 10)))
            return "kept"
        seqs = [seq for seq, _ in rows]
        if response.status == 200:
            self._failures = 0
            answers = (response.json_object() or {}).get("results", [])
            done: list[tuple[int, str]] = []
            for seq, answer in zip(seqs, answers, strict=False):
                status = answer.get("status") if isinstance(answer, dict) else None
                if status == "accepted":
                    result.accepted += 1
                elif status == "duplicate":
                    result.duplicate += 1
                else:
                    status = "refused"
                    result.rejected += 1
                    with self._lock:
                        self.dropped += 1
                    log.warning("chorus: report rejected by the collector: %s",
                                answer.get("error") if isinstance(answer, dict) else answer)
                done.append((seq, str(status)))
            self._settle(done)
            return "done" if len(done) == len(seqs) else "kept"
        if response.status == 413 and len(rows) > 1:
            return "split"  # over the collector's request limits: send smaller batches
        if 400 <= response.status < 500 and refuses_the_reports(response):
            # The reports themselves are unacceptable: resending cannot help.
            refusal = APIError(response.status, response.json_object())
            log.warning("chorus: dropping %d reports: %s", len(rows), refusal)
            result.rejected += len(rows)
            with self._lock:
                self.dropped += len(rows)
            self._settle([(seq, "refused") for seq in seqs])
            return "done"
        # 401/403 (a missing ingest key), 404, 429, 5xx, any answer that is not a Chorus
        # refusal of the reports (a proxy's error page): not the reports' fault; keep them.
        delay = max(self.retry.delay(min(self._failures, 10)), retry_after(response) or 0.0)
        log.warning("chorus: collector answered %d, %d reports kept for %.0f s",
                    response.status, len(rows), delay)
        self._hold_off(delay)
        return "kept"

    def _settle(self, answered: list[tuple[int, str]]) -> None:
        self._state.settle(answered, day=int(self._clock() // 86400), keep=self.sent_log)

    # -- the background thread ----------------------------------------------------------------

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True, name="chorus-sender")
        self.thread.start()

    def _next_due(self) -> float | None:
        due, fetch = self._state.next_due(), self._next_fetch()
        if fetch is not None:
            due = fetch if due is None else min(due, fetch)
        return due

    def _run(self) -> None:
        """Send reports (and fetch configs) as they become due."""
        while not self._stopping.is_set():
            try:
                self._round()
            except Exception:  # the sender must outlive any surprise; never the host app's
                log.exception("chorus: background sender error; retrying later")
                self._hold_off(self.retry.delay(min(self._failures, 10)))
                self._stopping.wait(1.0)

    def _round(self) -> None:
        due = self._next_due()
        now = self._clock()
        wait = 3600.0 if due is None else due - now
        wait = max(wait, self.hold_until - now, 0.0)
        self.wake.wait(timeout=min(wait, 3600.0))
        self.wake.clear()
        if self._stopping.is_set() or self._clock() < self.hold_until:
            return
        due = self._next_due()
        if due is not None and self._clock() >= due:
            # Interruptible: close() stops a retry wait at once.
            deadline = time.monotonic() + self.timeout * self.retry.max_attempts
            self.flush(deadline, self._stopping.wait)

    def stop(self, deadline: float | None) -> None:
        """Stop the background thread (waiting for it until ``deadline``), and clear any
        hold-off: the next flush is a last attempt, whatever the collector said before."""
        self._stopping.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.hold_until = 0.0
