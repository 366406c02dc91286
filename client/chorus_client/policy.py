"""The app's privacy policy: the caps it sets in code, what they refuse, what they bound.

The collector proposes a campaign's policy in its config; the app's caps decide. They refuse
configs that would spend too much per report, time-stamp reports too finely or split installs
into too many discovery groups, and cap what one campaign and the whole install may ever
spend (docs/threat-model.md, "Worst-case loss with the defaults").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chorus_client.state import Limits
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms.discovery import PrefixDiscovery

__all__ = ["DEFAULT_LIFETIME_BUDGET", "DEFAULT_MAX_EPSILON", "DEFAULT_MAX_GROUPS",
           "DEFAULT_MIN_TIME_PRECISION", "EXHAUSTED", "Caps", "PrivacyBound", "RollingWindow"]

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

#: Which setting ran out, in words an app developer can act on.
EXHAUSTED = {
    "max-reports": "the campaign's privacy.max_reports for this period is reached",
    "budget": "the campaign's privacy.budget for this period is spent",
    "campaign-budget": "the campaign's part of the app's privacy plan (Client(plan=...), "
                       "campaign_budget=) is spent",
    "lifetime-budget": "this install's lifetime_budget= (all campaigns) is spent",
    "spend-counter": "the app's spend_counter= could not be read or charged",
    "window-budget": "the app's rolling_window= for these days is spent",
}


@dataclass(frozen=True)
class RollingWindow:
    """A weaker unit, only on the app's request: at most ``budget`` ε in any ``days``
    consecutive UTC days, over all campaigns (``Client(rolling_window=...)``).

    It bounds a *rate*, not a total: a value that persists longer than ``days`` is exposed
    again in every window, up to ⌈lifetime/days⌉·budget over a lifetime
    (``../shared/docs/LONGITUDINAL.md`` §6). It adds to the lifetime budget, which still
    holds; it replaces it only if the app also sets ``lifetime_budget=math.inf``.
    """

    budget: float
    days: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.budget) and self.budget > 0):
            raise ValueError("rolling_window budget must be a positive finite ε")
        if isinstance(self.days, bool) or not isinstance(self.days, int) or self.days < 1:
            raise ValueError("rolling_window days must be a whole number of days >= 1")

    def describe(self, lifetime: float) -> str:
        year = math.ceil(365 / self.days) * self.budget
        text = (f"at most {self.budget:g} in any {self.days} UTC "
                f"day{'s' if self.days > 1 else ''}: a rate, weaker than a lifetime bound; "
                f"it protects what lasts less than {self.days} day"
                f"{'s' if self.days > 1 else ''}, not values that persist (over a year up to "
                f"{year:g})")
        if math.isfinite(lifetime):
            return f"{text}; the lifetime budget of {lifetime:g} still caps the total"
        return f"{text}; with no lifetime budget nothing caps the total"


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
    window: str = ""  # the app's rolling window in words (weaker than a lifetime bound)


@dataclass(frozen=True)
class Caps:
    """The limits an app sets in code (``Client(max_epsilon=..., ...)``)."""

    max_epsilon: float = DEFAULT_MAX_EPSILON
    lifetime_budget: float = DEFAULT_LIFETIME_BUDGET
    campaign_budget: float = math.inf
    min_time_precision: int = DEFAULT_MIN_TIME_PRECISION
    max_groups: int = DEFAULT_MAX_GROUPS
    window: RollingWindow | None = None

    def __post_init__(self) -> None:
        for name in ("lifetime_budget", "campaign_budget", "max_epsilon"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.max_groups < 1:
            raise ValueError("max_groups must be at least 1")

    def refusal(self, name: str, campaign: Campaign) -> str | None:
        """Why a verified config is beyond these caps, or None."""
        if campaign.epsilon > self.max_epsilon * (1 + 1e-9):  # ε = 2 resolves to 2.0000…01
            return (f"campaign {name!r} has ε = {campaign.epsilon:g} per report, above this "
                    f"client's limit of {self.max_epsilon:g} (Client(max_epsilon=...))")
        if campaign.time_precision < self.min_time_precision:
            return (f"campaign {name!r} time-stamps reports to {campaign.time_precision} s, "
                    f"finer than this client's limit of {self.min_time_precision} s "
                    "(Client(min_time_precision=...))")
        return self._group_refusal(name, campaign)

    def _group_refusal(self, name: str, campaign: Campaign) -> str | None:
        """A discovery campaign's groups are a partial pseudonym (see DEFAULT_MAX_GROUPS):
        refuse more of them, or a smaller one, than the app allows."""
        mechanism = campaign.mechanism
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

    def limits(self, campaign: Campaign, share: float = math.inf) -> Limits:
        """What the ledger checks before charging one report of this campaign, whose part of
        the app's privacy plan is ``share`` ε."""
        policy, epsilon = campaign.policy, campaign.epsilon
        return Limits(period_reports=policy.reports_per_period(epsilon),
                      max_reports=policy.max_reports, period_budget=policy.budget,
                      campaign_budget=min(self.campaign_budget, share),
                      lifetime_budget=self.lifetime_budget,
                      window_budget=math.inf if self.window is None else self.window.budget,
                      window_days=1 if self.window is None else self.window.days)

    def bound(self, name: str, campaign: Campaign, *, pinned: bool, persistent: bool,
              share: float = math.inf) -> PrivacyBound:
        """The most ε an install can lose to a campaign. For a pinned campaign: its policy,
        within its share of the plan and the caps. For an unpinned one the collector may
        serve another policy tomorrow, so only the unpinned allowance (``share``) and the caps
        bound it."""
        cap = min(self.campaign_budget, self.lifetime_budget, share)
        unit = campaign.policy.unit
        window = "" if self.window is None else self.window.describe(self.lifetime_budget)
        if not pinned:
            return PrivacyBound(campaign=name, unit=unit, per_report=self.max_epsilon,
                                per_period=cap, per_year=cap, lifetime=cap,
                                holds_across_restarts=persistent, window=window)
        bound = campaign.worst_case
        once = unit == "lifetime"
        return PrivacyBound(window=window,
            campaign=name, unit=unit, per_report=bound.per_report,
            per_period=min(bound.per_period if campaign.schedule is None else bound.per_report,
                           cap),
            per_year=min(bound.per_year, cap),
            lifetime=min(bound.per_period, cap) if once else cap,
            holds_across_restarts=persistent)
