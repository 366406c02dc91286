"""The Chorus client: perturb on the device, upload only the noisy report.

Create one :class:`Client` per app with the collector's URL::

    client = Client("https://collector.example")
    client.report("browser", "firefox")   # perturbed here; queued
    client.flush()                         # batched upload with retries

The true value never leaves :meth:`Client.report`: it is encoded and randomized with the OS
CSPRNG before anything is queued, and only the randomized payload is ever serialized.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chorus_client.errors import APIError, CampaignUnavailable, TransportError
from chorus_client.retry import RetryPolicy, send_with_retries
from chorus_client.transport import RequestsTransport, Response, Transport
from chorus_shared.campaign import Campaign, campaign_from_config
from chorus_shared.errors import CampaignError
from chorus_shared.rng import RandomSource, resolve_rng
from chorus_shared.wire import new_report_id

__all__ = ["Client", "FlushResult"]

log = logging.getLogger("chorus.client")
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


@dataclass
class FlushResult:
    """What one :meth:`Client.flush` achieved."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    pending: int = 0  # still queued after this flush (the collector could not be reached)


@dataclass(frozen=True)
class _Batch:
    body: bytes  # serialized once: retries resend exactly these bytes
    size: int


def _problem(response: Response) -> dict[str, Any] | None:
    try:
        body = json.loads(response.body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class Client:
    """Reports values to one collector. Thread-safe.

    :param url: the collector's base URL.
    :param transport: how requests are sent (default: :class:`RequestsTransport`).
    :param rng: randomness for the randomizers; ``None`` (the default) is the OS CSPRNG.
        Pass a seeded ``random.Random`` only in tests and simulations.
    :param timeout: seconds for each HTTP request; always on.
    :param batch_size: reports per upload; :meth:`report` flushes when a campaign's queue
        reaches it.
    :param max_epsilon: refuse campaigns whose ε exceeds this.
    :param campaign_configs: public campaign configs the app ships with, by name; they are
        verified exactly like fetched ones and save a request each.
    :param ingest_key: sent as a bearer token with reports, for collectors that require one.
    """

    def __init__(self, url: str, *, transport: Transport | None = None,
                 rng: RandomSource | None = None, timeout: float = 10.0,
                 batch_size: int = 100, retry: RetryPolicy | None = None,
                 max_epsilon: float = math.inf, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 campaign_configs: Mapping[str, Mapping[str, Any] | Campaign] | None = None,
                 ingest_key: str | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.url = url.rstrip("/")
        self.transport: Transport = transport if transport is not None else RequestsTransport()
        self._rng = resolve_rng(rng)
        self.timeout = timeout
        self.batch_size = batch_size
        self.retry = retry or RetryPolicy()
        self.max_epsilon = max_epsilon
        self._post_headers = dict(JSON_HEADERS)
        if ingest_key:
            self._post_headers["Authorization"] = f"Bearer {ingest_key}"
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.RLock()
        self._campaigns: dict[str, Campaign] = {}
        self._assignments: dict[str, dict[str, int]] = {}
        self._queue: list[dict[str, Any]] = []
        self._unsent: list[_Batch] = []
        self.dropped = 0  # reports the collector refused for good (logged, never retried)
        self.totals = FlushResult()  # everything acknowledged over this client's life
        for name, config in (campaign_configs or {}).items():
            self._adopt(name, config)

    # -- campaigns --------------------------------------------------------------------------

    def campaign(self, name: str) -> Campaign:
        """Fetch, verify and cache a campaign's public config."""
        with self._lock:
            cached = self._campaigns.get(name)
        if cached is not None:
            return cached
        response = send_with_retries(
            self.transport, "GET", f"{self.url}/v1/campaigns/{name}", None,
            {"Accept": "application/json"}, timeout=self.timeout, policy=self.retry,
            sleep=self._sleep,
        )
        if response.status != 200:
            raise CampaignUnavailable(response.status, _problem(response),
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
        with self._lock:
            campaign = self._campaigns.setdefault(name, campaign)
            self._assignments.setdefault(name, campaign.mechanism.assign(self._rng))
        return campaign

    # -- reporting --------------------------------------------------------------------------

    def report(self, campaign_name: str, value: object) -> None:
        """Perturb ``value`` on the device and queue the noisy report.

        Raises ``ValueDomainError`` if the value does not fit the campaign's domain.
        """
        campaign = self.campaign(campaign_name)
        mechanism = campaign.mechanism
        x = mechanism.encode(value)
        with self._lock:
            payload = mechanism.randomize(x, self._rng, self._assignments[campaign_name])
            report = {"report_id": new_report_id(), "digest": campaign.digest,
                      "time": campaign.time_bucket(self._clock()), "payload": payload}
            self._queue.append(report)
            full = len(self._queue) >= self.batch_size
        if full:
            self.flush()

    def pending(self) -> int:
        """Reports perturbed but not yet acknowledged by the collector."""
        with self._lock:
            return len(self._queue) + sum(b.size for b in self._unsent)

    def _seal_batches(self) -> None:
        """Turn queued reports into serialized batches (under the lock)."""
        for start in range(0, len(self._queue), self.batch_size):
            chunk = self._queue[start:start + self.batch_size]
            body = json.dumps({"reports": chunk}, separators=(",", ":")).encode()
            self._unsent.append(_Batch(body, len(chunk)))
        self._queue.clear()

    def flush(self) -> FlushResult:
        """Upload everything queued. Batches the collector cannot take yet stay queued."""
        result = FlushResult()
        with self._lock:
            self._seal_batches()
            batches, self._unsent = self._unsent, []
        kept: list[_Batch] = []
        for batch in batches:
            if not self._send_batch(batch, result):
                kept.append(batch)
        with self._lock:
            self._unsent = kept + self._unsent
            result.pending = len(self._queue) + sum(b.size for b in self._unsent)
            self.totals.accepted += result.accepted
            self.totals.duplicate += result.duplicate
            self.totals.rejected += result.rejected
            self.totals.pending = result.pending
        return result

    def _send_batch(self, batch: _Batch, result: FlushResult) -> bool:
        """Send one batch; False if it should be kept for a later flush."""
        url = f"{self.url}/v1/reports"
        try:
            response = send_with_retries(self.transport, "POST", url, batch.body,
                                         self._post_headers,
                                         timeout=self.timeout, policy=self.retry,
                                         sleep=self._sleep)
        except TransportError as error:
            log.warning("chorus: collector unreachable, %d reports kept: %s", batch.size, error)
            return False
        if response.status == 200:
            body = _problem(response) or {}
            for item in body.get("results", []):
                status = item.get("status")
                if status == "accepted":
                    result.accepted += 1
                elif status == "duplicate":
                    result.duplicate += 1
                else:
                    result.rejected += 1
                    self.dropped += 1
                    log.warning("chorus: report rejected by the collector: %s",
                                item.get("error"))
            return True
        if 400 <= response.status < 500 and response.status != 429:
            refusal = APIError(response.status, _problem(response))
            log.warning("chorus: dropping %d reports: %s", batch.size, refusal)
            result.rejected += batch.size
            self.dropped += batch.size
            return True
        log.warning("chorus: collector answered %d, %d reports kept", response.status,
                    batch.size)
        return False

    def close(self) -> FlushResult:
        """Flush what is queued and release the transport."""
        result = self.flush()
        closer = getattr(self.transport, "close", None)
        if callable(closer):
            closer()
        return result

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
