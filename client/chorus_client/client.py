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

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from chorus_client.configs import Configs, Pin
from chorus_client.errors import BudgetExceeded, CampaignUnavailable, ClientError, TransportError
from chorus_client.plan import CampaignPlan, PrivacyPlan, basis_of, draw_plan
from chorus_client.policy import (
    DEFAULT_LIFETIME_BUDGET,
    DEFAULT_MAX_EPSILON,
    DEFAULT_MAX_GROUPS,
    DEFAULT_MIN_TIME_PRECISION,
    EXHAUSTED,
    Caps,
    PrivacyBound,
    RollingWindow,
)
from chorus_client.retry import RetryPolicy
from chorus_client.sending import FlushResult, Sender
from chorus_client.sent_log import SentLog, SentReport
from chorus_client.spend import SpendCounter
from chorus_client.state import ClientState, PlanRow
from chorus_client.transport import RequestsTransport, Transport
from chorus_client.waiting import CampaignWaiting, Waiting
from chorus_shared.campaign import Campaign
from chorus_shared.errors import ValueDomainError
from chorus_shared.mechanisms import Mechanism
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.privacy import fits
from chorus_shared.rng import (
    RandomSource,
    assignment_label,
    is_secure,
    keyed_source,
    resolve_rng,
)
from chorus_shared.wire import new_report

__all__ = ["DEFAULT_LIFETIME_BUDGET", "DEFAULT_MAX_EPSILON", "DEFAULT_MAX_GROUPS",
           "CampaignPlan", "Client", "FlushResult", "Outcome", "Pin", "PrivacyBound",
           "PrivacyPlan", "RollingWindow"]

log = logging.getLogger("chorus.client")
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
Outcome = Literal["queued", "substituted", "skipped", "suppressed", "unavailable"]


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
    :param plan: how the lifetime budget is shared (:class:`PrivacyPlan`, or a mapping of ε
        per pinned campaign): by default the pinned campaigns share it equally, after a
        separate allowance for unpinned ones (1/8 of it, if ``allow_unpinned``).
    :param rolling_window: a weaker unit on the app's explicit request
        (:class:`RollingWindow`): at most this ε in any so many UTC days, in addition to the
        lifetime budget (which it replaces only if ``lifetime_budget=math.inf``).
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
    :param sent_log_size: how many answered reports :meth:`sent_log` keeps, the newest
        (0: none). They are the randomized reports the collector got, nothing more.
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
                 sent_log_size: int = 1000,
                 retry: RetryPolicy | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 ingest_key: str | None = None, max_groups: int = DEFAULT_MAX_GROUPS,
                 spend_counter: SpendCounter | None = None,
                 plan: PrivacyPlan | Mapping[str, float] | None = None,
                 rolling_window: RollingWindow | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if isinstance(sent_log_size, bool) or not isinstance(sent_log_size, int) \
                or sent_log_size < 0:
            raise ValueError("sent_log_size must be a whole number >= 0 (0 keeps no log)")
        if spend_counter is not None and not isinstance(spend_counter, SpendCounter):
            raise ValueError("spend_counter needs spent() and charge(epsilon) methods")
        if send_delay is not None and not send_delay >= 0:
            raise ValueError("send_delay must be None or a number of seconds >= 0")
        self.caps = Caps(max_epsilon=max_epsilon, lifetime_budget=lifetime_budget,
                         campaign_budget=campaign_budget,
                         min_time_precision=min_time_precision, max_groups=max_groups,
                         window=rolling_window)
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
        self.strict = strict
        self.ephemeral = ephemeral
        self.send_delay = send_delay
        self.spend_counter = spend_counter
        self._clock = clock
        self._sleep = sleep
        self._state = ClientState(state_dir)
        self._lock = threading.RLock()
        self.suppressed: Counter[str] = Counter()  # reports not made, by reason
        self.substituted = 0  # values outside their domain, sent as substitutes
        self.skipped = 0  # reports asked for outside the install's planned periods
        self._warned: set[tuple[str, str]] = set()
        self._closed = False
        self.timeout = timeout
        self.batch_size = batch_size
        self.retry = retry = retry or RetryPolicy()
        self.configs = Configs(url=self.url, transport=self.transport, state=self._state,
                               caps=self.caps, campaigns=campaigns,
                               allow_unpinned=allow_unpinned, send_delay=send_delay,
                               timeout=timeout, retry=retry, clock=clock, sleep=sleep,
                               rng=self._rng, rng_lock=self._lock)
        headers = dict(JSON_HEADERS)
        if ingest_key:
            headers["Authorization"] = f"Bearer {ingest_key}"
        self.sender = Sender(url=self.url, transport=self.transport, state=self._state,
                             headers=headers, timeout=timeout, retry=retry,
                             batch_size=batch_size, clock=clock, sleep=sleep,
                             before_round=self.configs.fetch_due,
                             next_fetch=self.configs.next_fetch, sent_log=sent_log_size)
        privacy_plan = plan if isinstance(plan, PrivacyPlan) else PrivacyPlan(
            budgets=dict(plan or {}))
        self.shares = privacy_plan.resolve(lifetime_budget, sorted(self.configs.pinned),
                                           allow_unpinned=allow_unpinned)
        for name in sorted(self.configs.pinned):  # fixed at first sight: now, if on the device
            held = self.configs.on_device(name)
            if held is not None:
                self._plan_for(name, held)
        if background:
            self.sender.start()

    # The settings an app may read back, under their constructor names.

    @property
    def max_epsilon(self) -> float:
        return self.caps.max_epsilon

    @property
    def lifetime_budget(self) -> float:
        return self.caps.lifetime_budget

    @property
    def campaign_budget(self) -> float:
        return self.caps.campaign_budget

    @property
    def min_time_precision(self) -> int:
        return self.caps.min_time_precision

    @property
    def max_groups(self) -> int:
        return self.caps.max_groups

    @property
    def allow_unpinned(self) -> bool:
        return self.configs.allow_unpinned

    @property
    def dropped(self) -> int:
        """Reports the collector refused for good (logged, never retried)."""
        return self.sender.dropped

    @property
    def totals(self) -> FlushResult:
        """Everything acknowledged over this client's life."""
        return self.sender.totals

    # -- campaigns --------------------------------------------------------------------------

    def campaign(self, name: str, *, retry: RetryPolicy | None = None) -> Campaign:
        """The verified config of a campaign: shipped, held from an earlier fetch, or fetched
        now and checked against its pin. (An app's call: :meth:`report` never fetches.)"""
        return self.configs.get(name, retry=retry)

    def prepare(self, timeout: float | None = 10.0) -> dict[str, bool]:
        """Fetch now every campaign pinned by digest whose config is not on the device yet,
        so that reports can be made at once; returns which are ready. Call it at start-up
        (a moment that says nothing about any report), not just before reporting."""
        ready = self.configs.prepare(timeout)
        for name, ok in ready.items():
            held = self.configs.on_device(name) if ok else None
            if held is not None:
                self._plan_for(name, held)
        return ready

    def worst_case(self, campaign_name: str) -> PrivacyBound:
        """The most ε this install can lose to a campaign, whatever it reports.

        For a pinned campaign: its policy, capped by this client. For an unpinned one the
        collector may serve another policy tomorrow, so only the client's caps bound it.
        """
        pool, share = self.shares.of(campaign_name)
        campaign = self.campaign(campaign_name)
        if pool == "pinned":
            share = min(share, self._plan_for(campaign_name, campaign).budget)
        return self.caps.bound(campaign_name, campaign,
                               pinned=campaign_name in self.configs.pinned,
                               persistent=not self.ephemeral, share=share)

    def plan(self) -> list[CampaignPlan]:
        """This install's privacy plan, per campaign: the ε it may spend, ε per report, how
        many reports and in which periods. Pinned campaigns whose config is not on the device
        yet show their share and no reports (they are planned when first seen)."""
        plans = []
        for name in sorted(self.configs.pinned | {row.campaign for row in
                                                  self._open_state().plans()}):
            pinned = name in self.configs.pinned
            share = self.shares.of(name)[1]
            campaign = self.configs.on_device(name) if pinned or self.allow_unpinned else None
            if campaign is None:
                plans.append(CampaignPlan(
                    campaign=name, pinned=pinned, budget=share, epsilon=math.nan, reports=0,
                    periods=None, reported=0, forfeited=0,
                    reporting="not planned yet: its config is not on the device"))
                continue
            plans.append(self._described(name, campaign, self._plan_for(name, campaign),
                                         pinned))
        return plans

    def _described(self, name: str, campaign: Campaign, row: PlanRow,
                   pinned: bool) -> CampaignPlan:
        state = self._open_state()
        schedule = campaign.schedule
        if schedule is None or row.slots is None:
            reported = state.reports_made(name)
            words = (f"{row.reports} {'report' if row.reports == 1 else 'reports'} at ε = "
                     f"{row.epsilon:.3g}, whenever the app reports"
                     + ("" if campaign.policy.unit == "lifetime" else
                        f" (at most {campaign.reports_per_install} a UTC day)"))
            return CampaignPlan(campaign=name, pinned=pinned, budget=row.budget,
                                epsilon=row.epsilon, reports=row.reports, periods=None,
                                reported=reported, forfeited=0, reporting=words)
        ahead = tuple(slot for slot in row.slots if slot >= row.first)
        dates = tuple(schedule.date(slot) for slot in ahead)
        forfeited = len(row.slots) - len(ahead)
        words = (f"{len(ahead)} {'report' if len(ahead) == 1 else 'reports'} at ε = "
                 f"{row.epsilon:.3g}, one in each of the {schedule.cadence}s starting "
                 f"{', '.join(dates) or '(none)'}")
        if forfeited:
            words += (f"; {forfeited} drawn {schedule.cadence}s were before this install "
                      "first saw the campaign and are forfeited (never charged)")
        return CampaignPlan(campaign=name, pinned=pinned, budget=row.budget,
                            epsilon=row.epsilon, reports=len(ahead), periods=dates,
                            reported=len(state.used_slots(name, row.basis)),
                            forfeited=forfeited, reporting=words)

    def _plan_for(self, name: str, campaign: Campaign) -> PlanRow:
        """The campaign's part of the plan, drawn and stored the first time it is seen (and
        again only for a config version with another calendar or ε)."""
        pool, share = self.shares.of(name)  # a name the plan does not pin is "unpinned"
        state = self._open_state()
        basis = basis_of(campaign)
        held = state.plan(name)
        if held is not None and held.basis == basis:
            return held
        now = self._clock()

        def build(held: PlanRow | None, spent: float, reserved: float) -> PlanRow:
            with self._lock:  # the rng is shared with the randomizers
                return draw_plan(campaign, pool=pool, budget=share, now=now, rng=self._rng,
                                 spent=spent, reserved=reserved, held=held)

        return state.settle_plan(name, basis, build)

    # -- reporting --------------------------------------------------------------------------

    def report(self, campaign_name: str, value: object) -> Outcome:
        """Perturb ``value`` on the device, charge the privacy ledger and queue the report.

        Returns ``"queued"``; ``"skipped"`` (the campaign has a calendar and this period is not
        one of the install's planned reporting periods, or its report was already made:
        nothing is sent or charged, and which periods those are never depends on a value);
        ``"substituted"`` (the value is outside the campaign's domain: a
        report of a uniformly drawn domain value was queued instead, so that sending never
        depends on the value); ``"suppressed"`` (a budget or report cap is used up: the
        same count of reports is refused whatever the values); or ``"unavailable"`` (the
        campaign is not pinned, its config is not on the device yet, or it could not be had
        or failed the checks).
        """
        campaign = self._campaign_for_report(campaign_name)
        if campaign is None:
            return "unavailable"
        now = self._clock()
        try:
            plan = self._plan_for(campaign_name, campaign)
            slot = self._slot(campaign_name, campaign, plan, now)
            if slot is False:
                return self._skipped()
            report, due, outside = self._perturb(campaign, value, now)
            decision = self._state.charge_and_queue(
                campaign=campaign_name, period=campaign.policy.period(now),
                cost=campaign.epsilon, limits=self.caps.limits(campaign, plan.budget),
                report=report, bucket=campaign.time_bucket(now), due=due,
                guard=None if self.spend_counter is None else self._charge_counter,
                slot=slot if isinstance(slot, tuple) else None, day=math.floor(now / 86400))
        except ClientError:  # closed by another thread meanwhile: nothing was charged
            if self.strict:
                raise
            return "unavailable"
        if not decision.allowed:
            if decision.reason == "slot-used":
                return self._skipped()
            return self._refused(campaign_name, decision.reason)
        if self.sender.thread is not None:
            self.sender.wake.set()
        if outside is not None:
            return self._substituted(campaign_name, outside)
        return "queued"

    def _slot(self, campaign_name: str, campaign: Campaign, plan: PlanRow,
              now: float) -> tuple[str, int] | bool:
        """The plan's slot a report now would use; False: this period is not one of the
        install's reporting periods; True: the campaign has no calendar.

        Decided by the clock and the stored plan only, before the value is looked at. A
        period earlier than one already asked for (the clock went back) stays closed, so no
        period is ever charged twice and a missed one is never made up later.
        """
        schedule = campaign.schedule
        if schedule is None or plan.slots is None:
            return True
        index = schedule.index(now)
        latest = self._state.advance(campaign_name, now)
        if latest is not None and index < schedule.index(latest):
            return False  # the clock went back: that period is closed
        if index < plan.first or index not in plan.slots:
            return False
        return (plan.basis, index)

    def _skipped(self) -> Outcome:
        with self._lock:
            self.skipped += 1
        return "skipped"

    def _campaign_for_report(self, campaign_name: str) -> Campaign | None:
        """The campaign's verified config, or None (counted and warned once) if there is none
        on the device now. report() never waits on a retry loop, and never makes a request
        unless ``send_delay=0``."""
        if self._closed:
            if self.strict:
                raise ClientError("the client is closed")
            return None
        try:
            return self.configs.for_report(campaign_name)
        except (CampaignUnavailable, TransportError) as error:
            kind = getattr(error, "kind", "network")
            if kind == "config-pending" and self.sender.thread is not None:
                self.sender.wake.set()  # the background sender has a fetch to schedule
            if self.strict:
                raise
            with self._lock:
                self.suppressed["unavailable"] += 1
            self._warn_once(campaign_name, f"unavailable: {kind}",
                            f"chorus: campaign {campaign_name!r} unavailable, no report made: "
                            f"{error}")
            return None

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
                        f"chorus: no more reports for {campaign_name!r}: {EXHAUSTED[reason]}")
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

    def sent_log(self, limit: int | None = None) -> SentLog:
        """What this device sent, newest first (at most ``sent_log_size`` reports are kept):
        each report as it left, the ε it was charged and the collector's answer, with the
        budget spent and left. ``.text()`` and ``.html()`` render it for the app's settings
        page, ``.as_dict()`` as data. It holds nothing the collector does not get."""
        rows = self._open_state().sent_log(limit)
        return SentLog(reports=tuple(SentReport.from_row(*row) for row in rows),
                       spent=self.spent(), lifetime_budget=self.lifetime_budget,
                       waiting=self.pending())

    def waiting(self) -> Waiting:
        """What waits in the outbox, per campaign, and when it may leave; ``str()`` of it
        reads "3 reports wait (browser: 3 reports leaving from 14:00 UTC)"."""
        now = self._clock()
        campaigns = {name: CampaignWaiting(count, first, last)
                     for name, count, first, last in self._open_state().waiting()}
        held = self.sender.hold_until
        return Waiting(now, campaigns, held if held > now else None)

    # -- sending ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> FlushResult:
        """Send the due reports, in batches of one campaign each, until none is left, the
        collector cannot take more, or ``timeout`` seconds have passed; fetch the configs
        that are due first. Reports not yet due (see ``send_delay``) and unsent ones stay
        queued.

        After the collector asked to wait (``Retry-After``) or could not be reached, flushing
        holds off until that time has passed, so a busy host app cannot hammer it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        return self.sender.flush(deadline)

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
        self.sender.stop(deadline)
        result = self.sender.flush(deadline, everything=self.ephemeral)
        if result.pending:
            # Not silent: a developer's first run ends with its reports still queued, and the
            # outbox looks like a broken client unless it says when they leave. Loud only
            # while this client has had nothing acknowledged (the first hour); routine after.
            left = self.waiting()
            log.log(logging.WARNING if self.totals.accepted == 0 else logging.INFO,
                    "chorus: closing with %s", left.explained())
        closer = getattr(self.transport, "close", None)
        if callable(closer):
            closer()
        self._state.close()
        return result

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
