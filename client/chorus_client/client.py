"""The Chorus client: perturb on the device, upload only the noisy report, never get in the way.

Create one :class:`Client` per app with the collector's URL and a directory for its state::

    client = Client("https://collector.example", state_dir=app_data / "chorus")
    client.report("browser", "firefox")   # perturbed here, charged, written to the outbox
    client.flush()                         # batched upload with retries (or background=True)

The true value never leaves :meth:`Client.report`: it is encoded and randomized with the OS
CSPRNG (or, for a memoized campaign, with a stream keyed by the install's secret) before
anything is stored or queued; only the randomized payload is ever written or sent.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from chorus_client.errors import (
    APIError,
    BudgetExceeded,
    CampaignUnavailable,
    ClientError,
    TransportError,
)
from chorus_client.retry import RetryPolicy, retry_after, send_with_retries
from chorus_client.state import ClientState
from chorus_client.transport import RequestsTransport, Response, Transport
from chorus_shared.campaign import Campaign, campaign_from_config, canonical_json
from chorus_shared.errors import CampaignError
from chorus_shared.privacy import report_cost
from chorus_shared.rng import DeterministicRandom, RandomSource, derive_key, resolve_rng
from chorus_shared.wire import new_report_id

__all__ = ["Client", "FlushResult", "Outcome"]

log = logging.getLogger("chorus.client")
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
Outcome = Literal["queued", "suppressed", "unavailable"]
_ONE_ATTEMPT = RetryPolicy(max_attempts=1)
# A campaign whose config could not be had is not asked for again before this many seconds.
UNAVAILABLE_HOLD_OFF = 60.0
# Request-level refusals that resending cannot cure: the batch is dropped (with a log line).
DROP_STATUSES = frozenset({400, 409, 415, 422})


@dataclass
class FlushResult:
    """What one :meth:`Client.flush` achieved."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    pending: int = 0  # still in the outbox afterwards (the collector could not be reached)


def _json_object(response: Response) -> dict[str, Any] | None:
    try:
        body = json.loads(response.body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class Client:
    """Reports values to one collector. Thread-safe; never raises into the host app for
    network trouble or an exhausted budget (unless ``strict``).

    :param url: the collector's base URL.
    :param state_dir: where the install's secret, privacy ledger and outbox live (an SQLite
        file). ``None`` keeps them in memory: budgets and memoization then last only as long
        as the process, and unsent reports are lost at exit.
    :param transport: how requests are sent (default: :class:`RequestsTransport`).
    :param rng: randomness for the randomizers; ``None`` (the default) is the OS CSPRNG.
        Pass a seeded ``random.Random`` only in tests and simulations.
    :param timeout: seconds for each HTTP request; always on.
    :param batch_size: reports per upload.
    :param max_batch_age: with ``background``, send when the oldest queued report is this old
        (seconds) even if the batch is not full.
    :param background: run a daemon thread that sends by size and age.
    :param strict: raise :class:`BudgetExceeded` and :class:`CampaignUnavailable` from
        :meth:`report` instead of logging and counting them.
    :param total_budget: cap on the ε this install spends over all campaigns, ever.
    :param budget_cap: the most ε this client lets any campaign spend per privacy unit,
        whatever budget the campaign's config states (the collector is not trusted with it).
    :param max_epsilon: refuse campaigns whose one-report ε exceeds this (default 10, above
        which randomization protects little).
    :param campaign_configs: public campaign configs (or verified :class:`Campaign` objects)
        the app ships with, by name; verified like fetched ones, they save a request each.
    :param ingest_key: sent as a bearer token with reports, for collectors that require one.
    """

    def __init__(self, url: str, *, state_dir: str | Path | None = None,
                 transport: Transport | None = None, rng: RandomSource | None = None,
                 timeout: float = 10.0, batch_size: int = 100, max_batch_age: float = 60.0,
                 background: bool = False, strict: bool = False,
                 total_budget: float = math.inf, budget_cap: float = 20.0,
                 retry: RetryPolicy | None = None, max_epsilon: float = 10.0,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 campaign_configs: Mapping[str, Mapping[str, Any] | Campaign] | None = None,
                 ingest_key: str | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_batch_age <= 0:
            raise ValueError("max_batch_age must be positive")
        self.url = url.rstrip("/")
        self.transport: Transport = transport if transport is not None else RequestsTransport()
        self._rng = resolve_rng(rng)
        self.timeout = timeout
        self.batch_size = batch_size
        self.max_batch_age = max_batch_age
        self.strict = strict
        self.total_budget = total_budget
        self.budget_cap = budget_cap
        self.retry = retry or RetryPolicy()
        self.max_epsilon = max_epsilon
        self._clock = clock
        self._sleep = sleep
        self._post_headers = dict(JSON_HEADERS)
        if ingest_key:
            self._post_headers["Authorization"] = f"Bearer {ingest_key}"
        self._state = ClientState(state_dir)
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._campaigns: dict[str, Campaign] = {}
        self._assignments: dict[str, dict[str, int]] = {}
        self.suppressed: Counter[str] = Counter()  # reports not sent, by reason
        self.dropped = 0  # reports the collector refused for good (logged, never retried)
        self.totals = FlushResult()  # everything acknowledged over this client's life
        for name, config in (campaign_configs or {}).items():
            self._adopt(name, config)
        self._hold_until = 0.0  # no sending before this (clock) time: Retry-After, backoff
        self._failures = 0
        self._closed = False
        self._unavailable: dict[str, float] = {}  # campaign → clock time to retry its config
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._sender: threading.Thread | None = None
        if background:
            self._sender = threading.Thread(target=self._send_in_background, daemon=True,
                                            name="chorus-sender")
            self._sender.start()

    # -- campaigns --------------------------------------------------------------------------

    def campaign(self, name: str, *, retry: RetryPolicy | None = None) -> Campaign:
        """Fetch, verify and cache a campaign's public config."""
        with self._lock:
            cached = self._campaigns.get(name)
        if cached is not None:
            return cached
        response = send_with_retries(
            self.transport, "GET", f"{self.url}/v1/campaigns/{quote(name, safe='')}", None,
            {"Accept": "application/json"}, timeout=self.timeout, policy=retry or self.retry,
            sleep=self._sleep,
        )
        if response.status != 200:
            raise CampaignUnavailable(response.status, _json_object(response),
                                      response.body.decode("utf-8", "replace"))
        try:
            config = json.loads(response.body)
        except ValueError:
            raise CampaignUnavailable(200, {"detail": "campaign config is not JSON"}) from None
        return self._adopt(name, config)

    def _adopt(self, name: str, config: object) -> Campaign:
        """Verify a public config (or take a verified :class:`Campaign`); cache it."""
        try:
            if isinstance(config, Campaign):
                campaign = config  # only ever built through validation
            elif isinstance(config, Mapping):
                # Re-derives ε from the parameters and checks the digest: a config that claims
                # less privacy loss than its parameters give is refused.
                campaign = campaign_from_config(config)
            else:
                raise CampaignError("a campaign config is a JSON object")
        except CampaignError as error:
            raise CampaignUnavailable(200, {"detail": f"invalid campaign config: {error}"}) \
                from None
        if campaign.name != name:
            raise CampaignUnavailable(200, {"detail": f"config is for {campaign.name!r}, "
                                        f"not {name!r}"})
        if campaign.epsilon > self.max_epsilon:
            raise CampaignUnavailable(200, {"detail": f"campaign {name!r} has ε = "
                                        f"{campaign.epsilon:g}, above this client's limit of "
                                        f"{self.max_epsilon:g}"})
        # The per-install assignment (cohort, α) is derived from the install's secret, so it
        # is the same after every restart and independent of any value.
        assigner = DeterministicRandom(derive_key(self._state.secret, "assign", campaign.digest))
        with self._lock:
            campaign = self._campaigns.setdefault(name, campaign)
            self._assignments.setdefault(name, campaign.mechanism.assign(assigner))
        return campaign

    # -- reporting --------------------------------------------------------------------------

    def report(self, campaign_name: str, value: object) -> Outcome:
        """Perturb ``value`` on the device, charge the privacy ledger and queue the report.

        Returns ``"queued"``, ``"suppressed"`` (over the campaign's budget or report cap, or
        the client's total budget) or ``"unavailable"`` (the campaign's config could not be
        had). Raises ``ValueDomainError`` if the value does not fit the campaign's domain.
        """
        if self._closed:
            if self.strict:
                raise ClientError("the client is closed")
            return "unavailable"
        try:
            if self._clock() < self._unavailable.get(campaign_name, -math.inf):
                raise CampaignUnavailable(0, {"detail": "config fetch failed recently"})
            # One attempt only: report() must not keep the host app waiting on a retry loop.
            campaign = self.campaign(campaign_name, retry=_ONE_ATTEMPT)
        except (CampaignUnavailable, TransportError) as error:
            if not isinstance(error, CampaignUnavailable) or error.status != 0:
                self._unavailable[campaign_name] = self._clock() + UNAVAILABLE_HOLD_OFF
            if self.strict:
                raise
            with self._lock:
                self.suppressed["unavailable"] += 1
            log.warning("chorus: campaign %r unavailable, report not made: %s", campaign_name,
                        error)
            return "unavailable"
        mechanism, policy = campaign.mechanism, campaign.policy
        x = mechanism.encode(value)
        assignment = self._assignments[campaign_name]
        fingerprint: bytes | None = None
        if policy.memoize:
            memo_value = canonical_json(mechanism.memo_input(x, assignment))
            fingerprint = derive_key(self._state.secret, "memo", campaign.digest, memo_value)
            permanent_rng = DeterministicRandom(
                derive_key(self._state.secret, "permanent", campaign.digest, memo_value))
            permanent = mechanism.permanent(mechanism.memo_input(x, assignment), permanent_rng,
                                            assignment)
            with self._lock:
                payload = mechanism.instantaneous(permanent, self._rng)
        else:
            with self._lock:
                payload = mechanism.randomize(x, self._rng, assignment)
        now = self._clock()
        report = json.dumps({"report_id": new_report_id(), "digest": campaign.digest,
                             "time": campaign.time_bucket(now), "payload": payload},
                            separators=(",", ":"))
        decision = self._state.charge_and_queue(
            campaign=campaign.digest, period=policy.period(now), fingerprint=fingerprint,
            cost_of=lambda earlier: report_cost(mechanism, policy.memoize, earlier),
            budget=min(policy.budget, self.budget_cap), max_reports=policy.max_reports,
            total_budget=self.total_budget, report=report, now=now)
        if not decision.allowed:
            with self._lock:
                self.suppressed[decision.reason] += 1
            if self.strict:
                raise BudgetExceeded(campaign_name, decision.reason)
            log.info("chorus: report for %r not sent: %s exhausted", campaign_name,
                     decision.reason)
            return "suppressed"
        if self._sender is not None and self._state.outbox_size() >= self.batch_size:
            self._wake.set()
        return "queued"

    def spent(self, campaign_name: str | None = None) -> float:
        """ε this install has spent, on one campaign (all periods) or in total."""
        if campaign_name is None:
            return self._state.spent()
        return self._state.spent(self.campaign(campaign_name).digest)

    def pending(self) -> int:
        """Reports perturbed and queued, not yet answered by the collector."""
        return self._state.outbox_size()

    # -- sending ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Send the outbox in batches until it is empty, the collector cannot take more, or
        ``timeout`` seconds have passed. Unsent reports stay queued.

        After the collector asked to wait (``Retry-After``) or could not be reached, flushing
        holds off until that time has passed, so a busy host app cannot hammer it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._flush(deadline, self._sleep)

    def _flush(self, deadline: float | None, sleep: Callable[[float], Any]) -> FlushResult:
        result = FlushResult()
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._flush_lock.acquire(timeout=-1 if wait is None else wait):
            result.pending = self.pending()
            return result
        try:
            size = self.batch_size
            while self._clock() >= self._hold_until and not self._state.closed:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                rows = self._state.outbox(size)
                if not rows:
                    break
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
            self._hold_until = self._clock() + seconds

    def _send_batch(self, rows: list[tuple[int, str]], result: FlushResult,
                    deadline: float | None, sleep: Callable[[float], Any]) -> str:
        """Send one batch: "done", "split" (too large: send halves) or "kept" (queued)."""
        body = ('{"reports":[' + ",".join(report for _, report in rows) + "]}").encode()
        try:
            response = send_with_retries(self.transport, "POST", f"{self.url}/v1/reports",
                                         body, self._post_headers, timeout=self.timeout,
                                         policy=self.retry, sleep=sleep, deadline=deadline)
        except TransportError as error:
            log.warning("chorus: collector unreachable, %d reports kept: %s", len(rows), error)
            self._hold_off(self.retry.delay(min(self._failures, 10)))
            return "kept"
        seqs = [seq for seq, _ in rows]
        if response.status == 200:
            self._failures = 0
            answers = (_json_object(response) or {}).get("results", [])
            done = []
            for seq, answer in zip(seqs, answers, strict=False):
                status = answer.get("status") if isinstance(answer, dict) else None
                if status == "accepted":
                    result.accepted += 1
                elif status == "duplicate":
                    result.duplicate += 1
                else:
                    result.rejected += 1
                    with self._lock:
                        self.dropped += 1
                    log.warning("chorus: report rejected by the collector: %s",
                                answer.get("error") if isinstance(answer, dict) else answer)
                done.append(seq)
            self._state.remove(done)
            return "done" if len(done) == len(seqs) else "kept"
        if response.status == 413 and len(rows) > 1:
            return "split"  # over the collector's request limits: send smaller batches
        if response.status in DROP_STATUSES or response.status == 413:
            # The reports themselves are unacceptable: resending cannot help.
            refusal = APIError(response.status, _json_object(response))
            log.warning("chorus: dropping %d reports: %s", len(rows), refusal)
            result.rejected += len(rows)
            with self._lock:
                self.dropped += len(rows)
            self._state.remove(seqs)
            return "done"
        # 401/403 (a missing ingest key), 404, 429, 5xx…: not the reports' fault; keep them.
        delay = max(self.retry.delay(min(self._failures, 10)), retry_after(response) or 0.0)
        log.warning("chorus: collector answered %d, %d reports kept for %.0f s",
                    response.status, len(rows), delay)
        self._hold_off(delay)
        return "kept"

    def _send_in_background(self) -> None:
        """Send when a batch is full or the oldest report is ``max_batch_age`` old."""
        while not self._stopping.is_set():
            try:
                self._background_round()
            except Exception:  # the sender must outlive any surprise; never the host app's
                log.exception("chorus: background sender error; retrying later")
                self._hold_off(self.retry.delay(min(self._failures, 10)))
                self._stopping.wait(1.0)

    def _background_round(self) -> None:
        oldest = self._state.oldest_queued()
        now = self._clock()
        wait = self.max_batch_age if oldest is None else oldest + self.max_batch_age - now
        wait = max(wait, self._hold_until - now, 0.0)
        self._wake.wait(timeout=min(wait, 3600.0))
        self._wake.clear()
        if self._stopping.is_set() or self._clock() < self._hold_until:
            return
        oldest = self._state.oldest_queued()
        due = oldest is not None and self._clock() - oldest >= self.max_batch_age
        if due or self._state.outbox_size() >= self.batch_size:
            # Interruptible: close() stops a retry wait at once.
            deadline = time.monotonic() + self.timeout * self.retry.max_attempts
            self._flush(deadline, self._stopping.wait)

    def close(self, timeout: float | None = 10.0) -> FlushResult:
        """Stop the background sender, flush for at most ``timeout`` seconds in all, release
        the transport. Reports still unsent stay in the outbox for the next run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if self._sender is not None:
            self._sender.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._hold_until = 0.0  # a last attempt, whatever the collector said before
        result = self._flush(deadline, self._sleep)
        with self._lock:
            self._closed = True
        closer = getattr(self.transport, "close", None)
        if callable(closer):
            closer()
        self._state.close()
        return result

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
