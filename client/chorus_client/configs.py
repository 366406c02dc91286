"""Campaign configs on the device: pinned, verified, kept, and fetched on a schedule of their own.

An app pins each campaign it reports to: the public config shipped with the app (never
fetched), or the SHA-256 digest the fetched config must have. ``allow_unpinned`` accepts what
the collector serves. Every config is verified (ε and the derived facts re-derived from the
parameters, the digest recomputed) and held to the app's caps (:class:`Caps`).

:meth:`Configs.for_report` never makes a request: a request naming the campaign at the
second of a report would time-stamp it, which the report's time bucket and random send delay
exist to hide. A config that is not on the device is fetched by the sender at a uniformly
random moment of the next time window (like a report made then), or by :meth:`prepare` at
start-up. Fetched configs are kept in the state file: a pinned one is never fetched again, an
unpinned one again a day later, on the sender's schedule.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from chorus_client.errors import CampaignUnavailable, TransportError
from chorus_client.policy import Caps
from chorus_client.retry import RetryPolicy, send_with_retries
from chorus_client.state import ClientState
from chorus_client.transport import Transport
from chorus_shared.campaign import Campaign, campaign_from_config, canonical_json
from chorus_shared.errors import CampaignError
from chorus_shared.rng import RandomSource

__all__ = ["CONFIG_REFRESH", "UNAVAILABLE_HOLD_OFF", "Configs", "Pin"]

log = logging.getLogger("chorus.client")
#: How an app pins a campaign: its config as shipped with the app (a mapping or a verified
#: :class:`Campaign`), or the SHA-256 digest the fetched config must have.
Pin = str | Mapping[str, Any] | Campaign
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
#: A campaign whose config could not be had is not asked for again before this many seconds.
UNAVAILABLE_HOLD_OFF = 60.0
#: An unpinned campaign's config kept on the device is fetched again this long after it was
#: fetched (plus a random delay, on the sender's schedule); a pinned digest fixes the content,
#: so a pinned config, once held, is never fetched again.
CONFIG_REFRESH = 86400.0


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def not_pinned(name: str) -> CampaignUnavailable:
    return CampaignUnavailable(0, {"type": "not-pinned", "detail": (
        f"campaign {name!r} is not pinned by this app (Client(campaigns=...)); unpinned "
        "campaigns need allow_unpinned=True")})


class Configs:
    """The campaigns one client may report to, and where their configs come from."""

    def __init__(self, *, url: str, transport: Transport, state: ClientState, caps: Caps,
                 campaigns: Mapping[str, Pin] | None, allow_unpinned: bool,
                 send_delay: float | None, timeout: float, retry: RetryPolicy,
                 clock: Callable[[], float], sleep: Callable[[float], None],
                 rng: RandomSource, rng_lock: threading.RLock) -> None:
        self.url = url
        self.transport = transport
        self.caps = caps
        self.allow_unpinned = allow_unpinned
        self.send_delay = send_delay
        self.timeout = timeout
        self.retry = retry
        self._state = state
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._lock = rng_lock  # the client's lock: the rng is shared with the randomizers
        self._campaigns: dict[str, Campaign] = {}
        self._pinned_digests: dict[str, str] = {}
        self.pinned = frozenset(campaigns or {})
        self._unavailable: dict[str, float] = {}  # campaign → clock time to retry its config
        # Fetches due on the sender's schedule (campaign → clock time), and when each held
        # unpinned config is to be fetched again.
        self._fetch_due: dict[str, float] = {}
        self._refresh_due: dict[str, float] = {}
        for name, pin in (campaigns or {}).items():
            if isinstance(pin, str):
                if not _DIGEST.match(pin):
                    raise ValueError(f"campaign {name!r} is pinned by {pin!r:.80}, which is "
                                     "not a SHA-256 digest (64 lowercase hex digits)")
                self._pinned_digests[name] = pin
            else:
                self._adopt(name, pin)  # a shipped config that fails the checks fails here
        now = self._clock()
        for name in self._pinned_digests:
            if self.held(name) is None:
                self._fetch_due[name] = self.fetch_time(now)
        if allow_unpinned:
            self._refresh_due.update((name, refresh) for name, refresh
                                     in state.config_refreshes().items()
                                     if name not in self.pinned)

    # -- what report() may use --------------------------------------------------------------

    def get(self, name: str, *, retry: RetryPolicy | None = None) -> Campaign:
        """The verified config: shipped, held from an earlier fetch, or fetched now (an app's
        call; :meth:`for_report` never fetches)."""
        with self._lock:
            cached = self._campaigns.get(name)
        if cached is not None:
            return cached
        held = self.held(name)
        return held if held is not None else self.fetch(name, retry)

    def for_report(self, name: str) -> Campaign:
        """The config a report is made with, or :class:`CampaignUnavailable` (status 0: no
        request was made). Never a request, unless ``send_delay=0`` gives the report's time
        away anyway (tests, simulations)."""
        with self._lock:
            cached = self._campaigns.get(name)
        if cached is not None:
            return cached
        held = self.held(name)
        if held is not None:
            return held
        if self._clock() < self._unavailable.get(name, -math.inf):
            raise CampaignUnavailable(0, {"type": "held-off",
                                          "detail": "config fetch failed recently"})
        if self.send_delay != 0:
            self._schedule(name)
        try:
            return self.fetch(name, ONE_ATTEMPT)
        except (CampaignUnavailable, TransportError) as error:
            if not isinstance(error, CampaignUnavailable) or error.status != 0:
                self._unavailable[name] = self._clock() + UNAVAILABLE_HOLD_OFF
            raise

    def _schedule(self, name: str) -> None:
        """No config on the device: schedule its fetch (never now) and refuse the report."""
        if name not in self._pinned_digests and not self.allow_unpinned:
            raise not_pinned(name)
        due = self._fetch_due.setdefault(name, self.fetch_time(self._clock()))
        when = time.strftime("%H:%M UTC", time.gmtime(due))
        raise CampaignUnavailable(0, {"type": "config-pending", "detail": (
            f"its config is not on this device yet; it is fetched at a random moment (at "
            f"{when}), not now, so that the request does not time-stamp this report. Ship the "
            "config with the app, or call Client.prepare() at start-up")})

    def on_device(self, name: str) -> Campaign | None:
        """The config shipped with the app or held from an earlier fetch; never a request."""
        with self._lock:
            cached = self._campaigns.get(name)
        return cached if cached is not None else self.held(name)

    def held(self, name: str) -> Campaign | None:
        """The config kept from an earlier fetch, verified again (the app's caps may have
        changed since), or None."""
        if self._state.closed:
            return None
        row = self._state.held_config(name)
        if row is None:
            return None
        body, refresh = row
        try:
            campaign = self._adopt(name, json.loads(body), self._pinned_digests.get(name),
                                   hold=False)
        except (CampaignUnavailable, ValueError):
            return None
        if name not in self.pinned:
            self._refresh_due.setdefault(name, refresh)
        return campaign

    # -- the fetch schedule -----------------------------------------------------------------

    def fetch_time(self, now: float) -> float:
        """When a config fetch asked for now is made: at a uniformly random moment of the next
        time window, like a report made now (``send_delay``), so that the request says no
        more about the moment of the report that needed it than the report itself does."""
        window = float(self.caps.min_time_precision)
        spread = window if self.send_delay is None else self.send_delay
        with self._lock:
            jitter = self._rng.random()
        return (math.floor(now / window) + 1) * window + jitter * spread

    def next_fetch(self) -> float | None:
        """When the sender next fetches a config (clock time), or None."""
        times = [*self._fetch_due.values(), *self._refresh_due.values()]
        return min(times) if times else None

    def fetch_due(self) -> None:
        """The sender's round: fetch the configs whose time has come, and refresh held
        unpinned ones that are due (reports keep using the held version meanwhile)."""
        now = self._clock()
        for name, due in sorted(self._fetch_due.items()):
            if due > now or self._state.closed:
                continue
            try:
                self.fetch(name, ONE_ATTEMPT)
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r config not fetched: %s", name, error)
                self._fetch_due[name] = self.fetch_time(now)
        for name, due in sorted(self._refresh_due.items()):
            if due > now or self._state.closed:
                continue
            try:
                fresh = self.fetch(name, ONE_ATTEMPT, replace=True)
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r config not refreshed: %s", name, error)
                self._refresh_due[name] = self.fetch_time(now)
                continue
            log.debug("chorus: campaign %r config refreshed (%s)", name, fresh.digest)

    def prepare(self, timeout: float | None) -> dict[str, bool]:
        """Fetch now every pinned campaign whose config is not on the device yet."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ready = {}
        for name in sorted(self.pinned):
            if deadline is not None and time.monotonic() >= deadline:
                ready[name] = self._campaigns.get(name) is not None
                continue
            try:
                self.get(name, retry=ONE_ATTEMPT)
                ready[name] = True
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r not ready: %s", name, error)
                ready[name] = False
        return ready

    # -- fetching and verifying ---------------------------------------------------------------

    def fetch(self, name: str, retry: RetryPolicy | None, *,
              replace: bool = False) -> Campaign:
        digest = self._pinned_digests.get(name)
        if digest is None and not self.allow_unpinned:
            raise not_pinned(name)
        response = send_with_retries(
            self.transport, "GET", f"{self.url}/v1/campaigns/{quote(name, safe='')}", None,
            {"Accept": "application/json"}, timeout=self.timeout, policy=retry or self.retry,
            sleep=self._sleep,
        )
        if response.status != 200:
            raise CampaignUnavailable(response.status, response.json_object(),
                                      response.body.decode("utf-8", "replace"))
        try:
            config = json.loads(response.body, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            raise CampaignUnavailable(200, {"detail": "campaign config is not JSON"}) from None
        return self._adopt(name, config, digest, replace=replace)

    def _adopt(self, name: str, config: object, digest: str | None = None, *,
               hold: bool = True, replace: bool = False) -> Campaign:
        """Verify a config (against its pinned digest, if any) and the app's caps; cache it,
        and keep a fetched one in the state file (``hold``)."""
        try:
            if isinstance(config, Campaign):
                campaign = config  # only ever built through validation
            elif isinstance(config, Mapping):
                # Re-derives ε and the derived facts from the parameters and checks the
                # digest: a config that claims less privacy loss than it gives is refused.
                campaign = campaign_from_config(config)
            else:
                raise CampaignError("a campaign config is a JSON object")
        except CampaignError as error:
            raise CampaignUnavailable(200, {"detail": f"invalid campaign config: {error}"}) \
                from None
        except Exception as error:
            raise CampaignUnavailable(200, {"detail": "invalid campaign config: "
                                            f"{type(error).__name__}"}) from None
        refusal = self._refusal(name, campaign, digest)
        if refusal:
            raise CampaignUnavailable(200, {"detail": refusal})
        if hold and (digest is not None or name not in self.pinned):
            # Held from now on, however it was fetched (the sender, prepare(), the app's
            # campaign()): a fetch still scheduled would only ask again.
            self._fetch_due.pop(name, None)
            refresh = self.fetch_time(self._clock() + CONFIG_REFRESH)
            if not self._state.closed:
                self._state.hold_config(
                    name, canonical_json(campaign.public_config()).decode(), refresh)
            if name not in self.pinned:
                self._refresh_due[name] = refresh
        with self._lock:
            if replace:
                self._campaigns[name] = campaign
                return campaign
            return self._campaigns.setdefault(name, campaign)

    def _refusal(self, name: str, campaign: Campaign, digest: str | None) -> str | None:
        if campaign.name != name:
            return f"config is for {campaign.name!r}, not {name!r}"
        if digest is not None and campaign.digest != digest:
            return (f"the collector served campaign {name!r} with digest {campaign.digest}, "
                    f"not the pinned {digest}")
        return self.caps.refusal(name, campaign)
