"""The Chorus client: perturb on the device, upload only the noisy report, never get in the way.

The app owns the privacy policy. It pins each campaign it reports to (the config shipped with
the app, or its digest), keeps the client's state in its private storage, and sets the caps::

    client = Client("https://collector.example", state_dir=app_data / "chorus",
                    campaigns={"browser": BROWSER_CONFIG})       # or {"browser": "<digest>"}
    client.report("browser", "firefox")   # perturbed here, charged, written to the outbox
    client.flush()                         # sends what is due (or background=True)

The client is the user's only guardian against the collector, so:

* a served config that differs from the pinned one is refused; accepting whatever the
  collector serves is an explicit opt-in (``allow_unpinned=True``), still within the caps;
* every report is randomized afresh with the OS CSPRNG and charged its ε, whatever the value,
  against the campaign's per-period budget, the app's per-campaign cap and a lifetime budget
  over all campaigns (on by default), all keyed by campaign name, so a new config version
  continues the same ledger;
* whether and when a report is sent never depends on the value: a value outside the domain is
  sent as a substitute drawn uniformly from the domain (or as the campaign's ``other``
  category), budgets are counted in reports, and reports leave after a random delay, one
  campaign per request, without cookies and with generic headers.

See docs/threat-model.md for what the collector, a database reader and a network observer
can learn.
"""

from __future__ import annotations

import json
import logging
import math
import re
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
from chorus_client.spend import SpendCounter
from chorus_client.state import ClientState, Limits
from chorus_client.transport import RequestsTransport, Response, Transport
from chorus_shared.campaign import Campaign, campaign_from_config, canonical_json
from chorus_shared.errors import CampaignError, ValueDomainError
from chorus_shared.mechanisms import Mechanism
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.mechanisms.discovery import PrefixDiscovery
from chorus_shared.privacy import fits
from chorus_shared.rng import (
    RandomSource,
    assignment_label,
    is_secure,
    keyed_source,
    resolve_rng,
)
from chorus_shared.wire import PROBLEM_BASE, REFUSED_REPORT_KINDS, new_report

__all__ = ["DEFAULT_LIFETIME_BUDGET", "DEFAULT_MAX_EPSILON", "DEFAULT_MAX_GROUPS", "Client",
           "FlushResult", "Outcome", "Pin", "PrivacyBound"]

log = logging.getLogger("chorus.client")
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
Outcome = Literal["queued", "substituted", "suppressed", "unavailable"]
#: How an app pins a campaign: its config as shipped with the app (a mapping or a verified
#: :class:`Campaign`), or the SHA-256 digest the fetched config must have.
Pin = str | Mapping[str, Any] | Campaign
_ONE_ATTEMPT = RetryPolicy(max_attempts=1)
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# A campaign whose config could not be had is not asked for again before this many seconds.
UNAVAILABLE_HOLD_OFF = 60.0
#: An unpinned campaign's config kept on the device is fetched again this long after it was
#: fetched (plus a random delay, on the sender's schedule); a pinned digest fixes the content,
#: so a pinned config, once held, is never fetched again.
CONFIG_REFRESH = 86400.0

# Which setting ran out, in words an app developer can act on.
_EXHAUSTED = {
    "max-reports": "the campaign's privacy.max_reports for this period is reached",
    "budget": "the campaign's privacy.budget for this period is spent",
    "campaign-budget": "this client's campaign_budget= for the campaign is spent",
    "lifetime-budget": "this install's lifetime_budget= (all campaigns) is spent",
    "spend-counter": "the app's spend_counter= could not be read or charged",
}

#: Per-report ε ceiling: ε ≈ 1 is strong protection, 2 keeps the truth in binary randomized
#: response with probability 0.88; above that a report protects less and less.
DEFAULT_MAX_EPSILON = 2.0
#: ε one install may spend over its whole life, on all campaigns together (docs/threat-model.md
#: justifies it: it bounds what anything observed can shift any belief about the person by a
#: factor of e^8 ≈ 3,000, the order of one google/rappor value's ε∞ and of Apple's
#: per-use-case daily budgets, but never renewed).
DEFAULT_LIFETIME_BUDGET = 8.0
#: The finest report-time precision accepted (seconds): finer buckets time-stamp a person.
DEFAULT_MIN_TIME_PRECISION = 3600
#: Most public groups a discovery campaign may split installs into (PEM, TreeHist). Every
#: report of one install, campaign, config version and period carries the same group, so
#: the group is a partial pseudonym: with at most G groups, none holding less than 1/(2G) of
#: the installs, it narrows an install down by at most log2(2G) = 7 bits. 64 covers the
#: defaults for strings of up to 64 bytes (PEM: 64 groups); a config with more is refused.
DEFAULT_MAX_GROUPS = 64


@dataclass
class FlushResult:
    """What one :meth:`Client.flush` achieved."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    pending: int = 0  # still in the outbox afterwards (not due, or the collector unreachable)


@dataclass(frozen=True)
class PrivacyBound:
    """The most ε this install can lose to one campaign, whatever its values, after the
    campaign's policy and this client's caps."""

    campaign: str
    unit: str  # the campaign's privacy period: "lifetime" or "day"
    per_report: float
    per_period: float
    per_year: float  # in any window of 365 days
    lifetime: float  # ever (math.inf only if the app removed the lifetime budget)
    holds_across_restarts: bool  # False for an ephemeral client: each process starts afresh


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _refuses_the_reports(response: Response) -> bool:
    """Whether the answer is a Chorus problem document saying the reports themselves are bad.

    Only then is a batch dropped (its ε stays spent): a 400 from a proxy, a captive portal or
    a load balancer, with an HTML body, says nothing about the reports.
    """
    media_type = (response.header("Content-Type") or "").split(";")[0].strip().lower()
    problem = _json_object(response) if media_type == "application/problem+json" else None
    kind = str((problem or {}).get("type", ""))
    return kind.startswith(PROBLEM_BASE) and kind[len(PROBLEM_BASE):] in REFUSED_REPORT_KINDS


def _not_pinned(name: str) -> CampaignUnavailable:
    return CampaignUnavailable(0, {"type": "not-pinned", "detail": (
        f"campaign {name!r} is not pinned by this app (Client(campaigns=...)); unpinned "
        "campaigns need allow_unpinned=True")})


def _json_object(response: Response) -> dict[str, Any] | None:
    try:
        body = json.loads(response.body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class Client:
    """Reports values to one collector. Thread-safe; never raises into the host app for
    network trouble or an exhausted budget (unless ``strict``).

    :param url: the collector's base URL (or a shuffler's, see docs/shuffler.md).
    :param state_dir: where the privacy ledger and the outbox live (an SQLite file in the app's
        private storage). Required, unless ``ephemeral``.
    :param ephemeral: keep the state in memory. Every process start is then a new install with
        a fresh budget, and unsent reports are lost at exit: only for short-lived programs
        that accept it explicitly.
    :param campaigns: the campaigns this app reports to, pinned by name: the public config
        shipped with the app (a mapping or a :class:`Campaign`, verified at construction and
        never fetched), or the digest the fetched config must have.
    :param allow_unpinned: also accept campaigns that are not pinned, in whatever version the
        collector serves (within the caps below). Off by default: the collector would choose
        the domain, ε and period.
    :param max_epsilon: refuse campaigns whose one-report ε exceeds this.
    :param lifetime_budget: the ε this install may spend over its life, on all campaigns.
    :param campaign_budget: the ε any one campaign may spend over the install's life (all
        periods and config versions); by default only the lifetime budget limits it.
    :param min_time_precision: refuse campaigns whose report times are finer than this many
        seconds.
    :param send_delay: a report becomes due at the end of its time bucket plus a uniformly
        random delay of up to this many seconds (``None``, the default: one time precision,
        so reports made during one bucket leave at random during the next). Arrival times then
        say nothing about when in its bucket a report was made. :meth:`flush` and the
        background sender send only due reports. ``0`` sends at once, which gives the report
        time away to the second: for tests and simulations.
    :param transport: how requests are sent (default: :class:`RequestsTransport`, which keeps
        no cookies, reuses no connection and sends generic headers).
    :param rng: randomness for the randomizers; ``None`` (the default) is the OS CSPRNG.
    :param allow_insecure_rng: accept an ``rng`` that is not the OS CSPRNG (a seeded
        ``random.Random``): for tests and simulations only, never in an app.
    :param timeout: seconds for each HTTP request; always on.
    :param batch_size: most reports per upload (all of one campaign).
    :param background: run a daemon thread that sends reports as they become due.
    :param strict: raise :class:`BudgetExceeded`, :class:`CampaignUnavailable` and
        ``ValueDomainError`` (after queuing the substitute) from :meth:`report` instead of
        logging and counting them.
    :param ingest_key: sent as a bearer token with reports, for collectors that require one.
    :param max_groups: refuse discovery campaigns that split installs into more public groups
        than this, or give any group less than 1/(2·max_groups) of them (see
        :data:`DEFAULT_MAX_GROUPS`).
    :param spend_counter: a second lifetime counter kept by the app where device backups do
        not restore it (:class:`chorus_client.spend.SpendCounter`): every report is charged
        there too before it is queued, so restoring an old state file cannot renew the
        lifetime budget.

    Configs that are not shipped with the app are fetched on the sender's schedule, never
    inside :meth:`report`: a request naming the campaign at the moment of a report would
    time-stamp it. A report made before its campaign's config is on the device is
    ``"unavailable"``; :meth:`prepare` fetches the pinned ones at once (call it at start-up).
    Fetched configs are kept in the state file. With ``send_delay=0``, which gives report
    times away anyway, a missing config is fetched inside :meth:`report`.
    """

    def __init__(self, url: str, *, state_dir: str | Path | None = None,
                 ephemeral: bool = False, campaigns: Mapping[str, Pin] | None = None,
                 allow_unpinned: bool = False, max_epsilon: float = DEFAULT_MAX_EPSILON,
                 lifetime_budget: float = DEFAULT_LIFETIME_BUDGET,
                 campaign_budget: float = math.inf,
                 min_time_precision: int = DEFAULT_MIN_TIME_PRECISION,
                 send_delay: float | None = None,
                 transport: Transport | None = None, rng: RandomSource | None = None,
                 allow_insecure_rng: bool = False,
                 timeout: float = 10.0, batch_size: int = 100,
                 background: bool = False, strict: bool = False,
                 retry: RetryPolicy | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 ingest_key: str | None = None, max_groups: int = DEFAULT_MAX_GROUPS,
                 spend_counter: SpendCounter | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if max_groups < 1:
            raise ValueError("max_groups must be at least 1")
        if spend_counter is not None and not isinstance(spend_counter, SpendCounter):
            raise ValueError("spend_counter needs spent() and charge(epsilon) methods")
        if send_delay is not None and not send_delay >= 0:
            raise ValueError("send_delay must be None or a number of seconds >= 0")
        for name, budget in (("lifetime_budget", lifetime_budget),
                             ("campaign_budget", campaign_budget),
                             ("max_epsilon", max_epsilon)):
            if not budget > 0:
                raise ValueError(f"{name} must be positive")
        if (state_dir is None) == (not ephemeral):
            raise ValueError(
                "pass state_dir (a directory in the app's private storage, so that budgets "
                "hold across restarts) or ephemeral=True (every process start is a new "
                "install with a fresh budget), not both or neither")
        if rng is not None and not is_secure(rng) and not allow_insecure_rng:
            raise ValueError("rng is not the OS CSPRNG: predictable coins undo the "
                             "randomization. Pass allow_insecure_rng=True in tests only.")
        self.url = url.rstrip("/")
        self.transport: Transport = transport if transport is not None else RequestsTransport()
        self._rng = resolve_rng(rng)
        self.timeout = timeout
        self.batch_size = batch_size
        self.strict = strict
        self.ephemeral = ephemeral
        self.allow_unpinned = allow_unpinned
        self.max_epsilon = max_epsilon
        self.lifetime_budget = lifetime_budget
        self.campaign_budget = campaign_budget
        self.min_time_precision = min_time_precision
        self.send_delay = send_delay
        self.max_groups = max_groups
        self.spend_counter = spend_counter
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._post_headers = dict(JSON_HEADERS)
        if ingest_key:
            self._post_headers["Authorization"] = f"Bearer {ingest_key}"
        self._state = ClientState(state_dir)
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._campaigns: dict[str, Campaign] = {}
        self._pinned_digests: dict[str, str] = {}
        self._pinned = frozenset(campaigns or {})
        self.suppressed: Counter[str] = Counter()  # reports not made, by reason
        self.substituted = 0  # values outside their domain, sent as substitutes
        self._warned: set[tuple[str, str]] = set()
        self.dropped = 0  # reports the collector refused for good (logged, never retried)
        self.totals = FlushResult()  # everything acknowledged over this client's life
        for name, pin in (campaigns or {}).items():
            if isinstance(pin, str):
                if not _DIGEST.match(pin):
                    raise ValueError(f"campaign {name!r} is pinned by {pin!r:.80}, which is "
                                     "not a SHA-256 digest (64 lowercase hex digits)")
                self._pinned_digests[name] = pin
            else:
                self._adopt(name, pin)  # a shipped config that fails the checks fails here
        self._hold_until = 0.0  # no sending before this (clock) time: Retry-After, backoff
        self._failures = 0
        self._closed = False
        self._unavailable: dict[str, float] = {}  # campaign → clock time to retry its config
        # Config fetches due on the sender's schedule (campaign → clock time), and when each
        # held unpinned config is to be fetched again.
        self._fetch_due: dict[str, float] = {}
        self._refresh_due: dict[str, float] = {}
        now = self._clock()
        for name in self._pinned_digests:
            if self._held(name) is None:
                self._fetch_due[name] = self._fetch_time(now)
        if allow_unpinned:
            self._refresh_due.update((name, refresh) for name, refresh
                                     in self._state.config_refreshes().items()
                                     if name not in self._pinned)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._sender: threading.Thread | None = None
        if background:
            self._sender = threading.Thread(target=self._send_in_background, daemon=True,
                                            name="chorus-sender")
            self._sender.start()

    # -- campaigns --------------------------------------------------------------------------

    def campaign(self, name: str, *, retry: RetryPolicy | None = None) -> Campaign:
        """The verified config of a campaign: shipped, held from an earlier fetch, or fetched
        now and checked against its pin. (An app's call: :meth:`report` never fetches.)"""
        with self._lock:
            cached = self._campaigns.get(name)
        if cached is not None:
            return cached
        held = self._held(name)
        return held if held is not None else self._fetch(name, retry)

    def prepare(self, timeout: float | None = 10.0) -> dict[str, bool]:
        """Fetch now every campaign pinned by digest whose config is not on the device yet,
        so that reports can be made at once; returns which are ready. Call it at start-up
        (a moment that says nothing about any report), not just before reporting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ready = {}
        for name in sorted(self._pinned):
            if deadline is not None and time.monotonic() >= deadline:
                ready[name] = self._campaigns.get(name) is not None
                continue
            try:
                self.campaign(name, retry=_ONE_ATTEMPT)
                ready[name] = True
                self._fetch_due.pop(name, None)
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r not ready: %s", name, error)
                ready[name] = False
        return ready

    def _held(self, name: str) -> Campaign | None:
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
        if name not in self._pinned:
            self._refresh_due.setdefault(name, refresh)
        return campaign

    def _fetch_time(self, now: float) -> float:
        """When a config fetch asked for now is made: at a uniformly random moment of the next
        time window, like a report made now (``send_delay``), so that the request says no
        more about the moment of the report that needed it than the report itself does."""
        window = float(self.min_time_precision)
        spread = window if self.send_delay is None else self.send_delay
        with self._lock:
            jitter = self._rng.random()
        return (math.floor(now / window) + 1) * window + jitter * spread

    def _fetch_due_configs(self) -> None:
        """The sender's round: fetch the configs whose time has come, and refresh held
        unpinned ones that are due (report() keeps using the held version meanwhile)."""
        now = self._clock()
        for name, due in sorted(self._fetch_due.items()):
            if due > now or self._state.closed:
                continue
            try:
                self._fetch(name, _ONE_ATTEMPT)
                self._fetch_due.pop(name, None)
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r config not fetched: %s", name, error)
                self._fetch_due[name] = self._fetch_time(now)
        for name, due in sorted(self._refresh_due.items()):
            if due > now or self._state.closed:
                continue
            try:
                fresh = self._fetch(name, _ONE_ATTEMPT, replace=True)
            except (CampaignUnavailable, TransportError) as error:
                log.warning("chorus: campaign %r config not refreshed: %s", name, error)
                self._refresh_due[name] = self._fetch_time(now)
                continue
            log.debug("chorus: campaign %r config refreshed (%s)", name, fresh.digest)

    def next_fetch(self) -> float | None:
        """When the sender next fetches a config (clock time), or None."""
        times = [*self._fetch_due.values(), *self._refresh_due.values()]
        return min(times) if times else None

    def _fetch(self, name: str, retry: RetryPolicy | None, *,
               replace: bool = False) -> Campaign:
        digest = self._pinned_digests.get(name)
        if digest is None and not self.allow_unpinned:
            raise _not_pinned(name)
        response = send_with_retries(
            self.transport, "GET", f"{self.url}/v1/campaigns/{quote(name, safe='')}", None,
            {"Accept": "application/json"}, timeout=self.timeout, policy=retry or self.retry,
            sleep=self._sleep,
        )
        if response.status != 200:
            raise CampaignUnavailable(response.status, _json_object(response),
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
        if hold and (digest is not None or name not in self._pinned):
            refresh = self._fetch_time(self._clock() + CONFIG_REFRESH)
            if not self._state.closed:
                self._state.hold_config(name, canonical_json(campaign.public_config()).decode(),
                                        refresh)
            if name not in self._pinned:
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
        if campaign.epsilon > self.max_epsilon * (1 + 1e-9):  # ε = 2 resolves to 2.0000…01
            return (f"campaign {name!r} has ε = {campaign.epsilon:g} per report, above this "
                    f"client's limit of {self.max_epsilon:g} (Client(max_epsilon=...))")
        if campaign.time_precision < self.min_time_precision:
            return (f"campaign {name!r} time-stamps reports to {campaign.time_precision} s, "
                    f"finer than this client's limit of {self.min_time_precision} s "
                    "(Client(min_time_precision=...))")
        return self._group_refusal(name, campaign.mechanism)

    def _group_refusal(self, name: str, mechanism: Mechanism) -> str | None:
        """A discovery campaign's groups are a partial pseudonym (see DEFAULT_MAX_GROUPS):
        refuse more of them, or a smaller one, than the app allows."""
        if not isinstance(mechanism, PrefixDiscovery):
            return None
        groups = mechanism.groups
        smallest = min(mechanism.group_probability(g) for g in range(groups))
        if groups > self.max_groups or smallest < 1 / (2 * self.max_groups):
            return (f"campaign {name!r} splits installs into {groups} public groups, the "
                    f"smallest holding {smallest:.2%} of them; this client allows at most "
                    f"{self.max_groups} groups of at least {1 / (2 * self.max_groups):.2%} "
                    "(Client(max_groups=...))")
        return None

    def worst_case(self, campaign_name: str) -> PrivacyBound:
        """The most ε this install can lose to a campaign, whatever it reports.

        For a pinned campaign: its policy, capped by this client. For an unpinned one the
        collector may serve another policy tomorrow, so only the client's caps bound it.
        """
        campaign = self.campaign(campaign_name)
        bound = campaign.worst_case
        cap = min(self.campaign_budget, self.lifetime_budget)
        if campaign_name not in self._pinned:
            return PrivacyBound(campaign=campaign_name, unit=campaign.policy.unit,
                                per_report=self.max_epsilon, per_period=cap, per_year=cap,
                                lifetime=cap, holds_across_restarts=not self.ephemeral)
        once = campaign.policy.unit == "lifetime"
        return PrivacyBound(
            campaign=campaign_name, unit=campaign.policy.unit, per_report=bound.per_report,
            per_period=min(bound.per_period, cap), per_year=min(bound.per_year, cap),
            lifetime=min(bound.per_period, cap) if once else cap,
            holds_across_restarts=not self.ephemeral)

    # -- reporting --------------------------------------------------------------------------

    def report(self, campaign_name: str, value: object) -> Outcome:
        """Perturb ``value`` on the device, charge the privacy ledger and queue the report.

        Returns ``"queued"``; ``"substituted"`` (the value is outside the campaign's domain: a
        report of a uniformly drawn domain value was queued instead, so that sending never
        depends on the value); ``"suppressed"`` (a budget or report cap is used up: the
        same count of reports is refused whatever the values); or ``"unavailable"`` (the
        campaign is not pinned, or its config could not be had or failed the checks).
        """
        campaign = self._campaign_for_report(campaign_name)
        if campaign is None:
            return "unavailable"
        now = self._clock()
        report, due, outside = self._perturb(campaign, value, now)
        policy, epsilon = campaign.policy, campaign.epsilon
        limits = Limits(period_reports=policy.reports_per_period(epsilon),
                        max_reports=policy.max_reports, period_budget=policy.budget,
                        campaign_budget=self.campaign_budget,
                        lifetime_budget=self.lifetime_budget)
        try:
            decision = self._state.charge_and_queue(
                campaign=campaign_name, period=policy.period(now), cost=epsilon,
                limits=limits, report=report, bucket=campaign.time_bucket(now), due=due,
                guard=None if self.spend_counter is None else self._charge_counter)
        except ClientError:  # closed by another thread meanwhile: nothing was charged
            if self.strict:
                raise
            return "unavailable"
        if not decision.allowed:
            return self._refused(campaign_name, decision.reason)
        if self._sender is not None:
            self._wake.set()
        if outside is not None:
            return self._substituted(campaign_name, outside)
        return "queued"

    def _campaign_for_report(self, campaign_name: str) -> Campaign | None:
        """The campaign's verified config, or None (counted and warned once) if there is none
        to be had now. One fetch attempt at most: report() never waits on a retry loop."""
        if self._closed:
            if self.strict:
                raise ClientError("the client is closed")
            return None
        try:
            with self._lock:
                cached = self._campaigns.get(campaign_name)
            if cached is not None:
                return cached
            held = self._held(campaign_name)
            if held is not None:
                return held
            if self._clock() < self._unavailable.get(campaign_name, -math.inf):
                raise CampaignUnavailable(0, {"type": "held-off",
                                              "detail": "config fetch failed recently"})
            if self.send_delay != 0:
                self._config_pending(campaign_name)
            return self._fetch(campaign_name, _ONE_ATTEMPT)
        except (CampaignUnavailable, TransportError) as error:
            if not isinstance(error, CampaignUnavailable) or error.status != 0:
                self._unavailable[campaign_name] = self._clock() + UNAVAILABLE_HOLD_OFF
            if self.strict:
                raise
            with self._lock:
                self.suppressed["unavailable"] += 1
            self._warn_once(campaign_name, f"unavailable: {getattr(error, 'kind', 'network')}",
                            f"chorus: campaign {campaign_name!r} unavailable, no report made: "
                            f"{error}")
            return None

    def _config_pending(self, campaign_name: str) -> None:
        """No config on the device: schedule its fetch (never now, see :meth:`_fetch_time`)
        and make no report."""
        if campaign_name not in self._pinned_digests and not self.allow_unpinned:
            raise _not_pinned(campaign_name)
        due = self._fetch_due.setdefault(campaign_name, self._fetch_time(self._clock()))
        if self._sender is not None:
            self._wake.set()
        when = time.strftime("%H:%M UTC", time.gmtime(due))
        raise CampaignUnavailable(0, {"type": "config-pending", "detail": (
            f"its config is not on this device yet; it is fetched at a random moment (at "
            f"{when}), not now, so that the request does not time-stamp this report. Ship the "
            "config with the app, or call Client.prepare() at start-up")})

    def _perturb(self, campaign: Campaign, value: object,
                 now: float) -> tuple[str, float, ValueDomainError | None]:
        """The wire report for the value (or for a substitute), and when it becomes due."""
        mechanism = campaign.mechanism
        x, outside = self._encoded(mechanism, value)
        assignment = self._assignment(campaign, now)
        with self._lock:
            if outside is not None:  # a value the domain cannot take: a substitute, not nothing
                x = mechanism.encode(campaign.domain.random_value(self._rng))
            # No assignment but a discovery campaign's group: cohorts and hash seeds are drawn
            # afresh for every report.
            payload = mechanism.randomize(x, self._rng, assignment)
            jitter = self._rng.random()
        return new_report(campaign, payload, now).to_wire(), self._due(campaign, now, jitter), \
            outside

    def _assignment(self, campaign: Campaign, now: float) -> Mapping[str, int]:
        """A discovery campaign's group for this privacy period (PEM's user split): derived
        from the install's key, the campaign's name, its config version and the period, so a
        restart keeps it, no value moves it, and each version the collector serves gets an
        independent draw. Every other mechanism draws its public choices per report."""
        mechanism = campaign.mechanism
        if not getattr(mechanism, "keyed_assignment", False):
            return EMPTY
        key = self._open_state().assignment_key()
        label = assignment_label(campaign.name, campaign.digest, campaign.policy.period(now))
        return mechanism.assign(keyed_source(key, label))

    def _charge_counter(self, cost: float) -> str | None:
        """The app's own lifetime counter: checked, then charged, before the report is
        written (so a crash in between over-counts, never under-counts)."""
        assert self.spend_counter is not None
        try:
            if not fits(self.spend_counter.spent(), cost, self.lifetime_budget):
                return "lifetime-budget"
            self.spend_counter.charge(cost)
        except Exception as error:  # the app's code: refuse the report, never raise
            log.warning("chorus: spend_counter failed (%s); no report made",
                        type(error).__name__)
            return "spend-counter"
        return None

    def _refused(self, campaign_name: str, reason: str) -> Outcome:
        with self._lock:
            self.suppressed[reason] += 1
        if self.strict:
            raise BudgetExceeded(campaign_name, reason)
        self._warn_once(campaign_name, reason,
                        f"chorus: no more reports for {campaign_name!r}: {_EXHAUSTED[reason]}")
        return "suppressed"

    def _substituted(self, campaign_name: str, outside: ValueDomainError) -> Outcome:
        with self._lock:
            self.substituted += 1
        self._warn_once(campaign_name, "substituted",
                        f"chorus: a value for {campaign_name!r} is outside the campaign's "
                        f"domain; a substitute report was sent instead ({outside})")
        if self.strict:
            raise ValueDomainError(str(outside))  # fresh: no context holding the value
        return "substituted"

    @staticmethod
    def _encoded(mechanism: Mechanism, value: object) -> tuple[Any, ValueDomainError | None]:
        """The mechanism's input for the value, or why there is none. Any failure counts, so
        that no value can make ``report()`` raise or skip the report; the error never carries
        the value."""
        try:
            return mechanism.encode(value), None
        except ValueDomainError as error:
            return None, error
        except Exception as error:  # e.g. a type encode() did not foresee
            return None, ValueDomainError("the value cannot be encoded "
                                          f"({type(error).__name__})")

    def _due(self, campaign: Campaign, now: float, jitter: float) -> float:
        """When a report made now may leave: independent of the moment within its bucket."""
        if self.send_delay == 0:
            return now
        window = campaign.time_precision if self.send_delay is None else self.send_delay
        return campaign.time_bucket(now) + campaign.time_precision + jitter * window

    def _warn_once(self, campaign_name: str, reason: str, message: str) -> None:
        """A warning the first time per campaign and reason; later ones at debug level, so
        that a host app reporting in a loop does not flood its log."""
        with self._lock:
            first = (campaign_name, reason) not in self._warned
            self._warned.add((campaign_name, reason))
        log.log(logging.WARNING if first else logging.DEBUG, message)

    def spent(self, campaign_name: str | None = None) -> float:
        """ε this install has spent, on one campaign (all periods and versions) or in total
        (the larger of the ledger and the app's ``spend_counter``)."""
        ledger = self._open_state().spent(campaign_name)
        if campaign_name is None and self.spend_counter is not None:
            try:
                return max(ledger, self.spend_counter.spent())
            except Exception:
                return math.inf  # as report() does: an unreadable counter spends nothing more
        return ledger

    def remaining(self) -> float:
        """ε left of the lifetime budget."""
        return max(0.0, self.lifetime_budget - self.spent())

    def _open_state(self) -> ClientState:
        self._state.check_open()
        return self._state

    def pending(self) -> int:
        """Reports perturbed and queued, not yet answered by the collector."""
        return self._open_state().outbox_size()

    # -- sending ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Send the due reports, in batches of one campaign each, until none is left, the
        collector cannot take more, or ``timeout`` seconds have passed. Reports not yet due
        (see ``send_delay``) and unsent ones stay queued.

        After the collector asked to wait (``Retry-After``) or could not be reached, flushing
        holds off until that time has passed, so a busy host app cannot hammer it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._flush(deadline, self._sleep)

    def _flush(self, deadline: float | None, sleep: Callable[[float], Any], *,
               everything: bool = False) -> FlushResult:
        result = FlushResult()
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._flush_lock.acquire(timeout=-1 if wait is None else wait):
            result.pending = self.pending()
            return result
        try:
            if not self._state.closed:
                self._fetch_due_configs()
            size = self.batch_size
            while self._clock() >= self._hold_until and not self._state.closed:
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
        if 400 <= response.status < 500 and _refuses_the_reports(response):
            # The reports themselves are unacceptable: resending cannot help.
            refusal = APIError(response.status, _json_object(response))
            log.warning("chorus: dropping %d reports: %s", len(rows), refusal)
            result.rejected += len(rows)
            with self._lock:
                self.dropped += len(rows)
            self._state.remove(seqs)
            return "done"
        # 401/403 (a missing ingest key), 404, 429, 5xx, any answer that is not a Chorus
        # refusal of the reports (a proxy's error page): not the reports' fault; keep them.
        delay = max(self.retry.delay(min(self._failures, 10)), retry_after(response) or 0.0)
        log.warning("chorus: collector answered %d, %d reports kept for %.0f s",
                    response.status, len(rows), delay)
        self._hold_off(delay)
        return "kept"

    def _send_in_background(self) -> None:
        """Send reports as they become due."""
        while not self._stopping.is_set():
            try:
                self._background_round()
            except Exception:  # the sender must outlive any surprise; never the host app's
                log.exception("chorus: background sender error; retrying later")
                self._hold_off(self.retry.delay(min(self._failures, 10)))
                self._stopping.wait(1.0)

    def _background_round(self) -> None:
        due = self._state.next_due()
        fetch = self.next_fetch()
        if fetch is not None:
            due = fetch if due is None else min(due, fetch)
        now = self._clock()
        wait = 3600.0 if due is None else due - now
        wait = max(wait, self._hold_until - now, 0.0)
        self._wake.wait(timeout=min(wait, 3600.0))
        self._wake.clear()
        if self._stopping.is_set() or self._clock() < self._hold_until:
            return
        due = self._state.next_due()
        fetch = self.next_fetch()
        if fetch is not None:
            due = fetch if due is None else min(due, fetch)
        if due is not None and self._clock() >= due:
            # Interruptible: close() stops a retry wait at once.
            deadline = time.monotonic() + self.timeout * self.retry.max_attempts
            self._flush(deadline, self._stopping.wait)

    def close(self, timeout: float | None = 10.0) -> FlushResult:
        """Stop the background sender, flush the due reports for at most ``timeout`` seconds
        in all, release the transport. Reports still unsent stay in the outbox for the next
        run; an ephemeral client, which has no next run, sends all of them now. Closing again
        does nothing."""
        with self._lock:
            if self._closed:
                return FlushResult()
            self._closed = True  # from now on report() makes nothing
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if self._sender is not None:
            self._sender.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._hold_until = 0.0  # a last attempt, whatever the collector said before
        result = self._flush(deadline, self._sleep, everything=self.ephemeral)
        closer = getattr(self.transport, "close", None)
        if callable(closer):
            closer()
        self._state.close()
        return result

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
