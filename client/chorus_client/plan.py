"""The app's privacy plan: how one install's lifetime budget is shared between campaigns and
spread over time (docs/client.md, "Planning the lifetime budget").

The app states the split in code, as ε per campaign or as shares::

    Client(..., plan=PrivacyPlan(budgets={"browser": 4.0, "latency": 2.0}))
    Client(..., plan=PrivacyPlan.from_shares({"browser": 2, "latency": 1}))

Pinned campaigns the plan does not name share what is left equally. Unpinned campaigns (the
collector chooses them, ``allow_unpinned=True``) draw from a separate allowance, reserved
campaign by campaign when each is first seen: they can never take a pinned campaign's ε.

When the install first sees a campaign, its part of the plan is fixed and stored: ε per
report, how many reports its share pays for, and, for a campaign with a calendar
(:mod:`chorus_shared.schedule`), in which periods. Nothing in it depends on a value.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from chorus_client.state import PlanRow
from chorus_shared.campaign import Campaign, canonical_json
from chorus_shared.privacy import reports_within
from chorus_shared.rng import RandomSource
from chorus_shared.schedule import draw_periods

__all__ = ["DEFAULT_UNPINNED_SHARE", "CampaignPlan", "PrivacyPlan", "Shares", "basis_of",
           "draw_plan"]

#: Without an explicit allowance, unpinned campaigns may use this fraction of the lifetime
#: budget when the app also pins campaigns (all of it when it pins none).
DEFAULT_UNPINNED_SHARE = 1 / 8


@dataclass(frozen=True)
class Shares:
    """The ε each part of the plan may spend over the install's life."""

    pinned: Mapping[str, float]
    unpinned: float

    def of(self, name: str) -> tuple[str, float]:
        """Which pool pays for a campaign, and its budget there (an unpinned campaign's is
        the whole allowance, before what the other unpinned campaigns reserved)."""
        if name in self.pinned:
            return "pinned", self.pinned[name]
        return "unpinned", self.unpinned


@dataclass(frozen=True)
class PrivacyPlan:
    """How the app shares its lifetime budget: ``budgets`` (ε per pinned campaign) or
    ``shares`` (relative weights over what the unpinned allowance leaves), and ``unpinned``
    (the ε all unpinned campaigns together may use; ``None``: :data:`DEFAULT_UNPINNED_SHARE`
    of the lifetime budget if unpinned campaigns are allowed, else 0)."""

    budgets: Mapping[str, float] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)
    unpinned: float | None = None

    def __post_init__(self) -> None:
        if self.budgets and self.shares:
            raise ValueError("give the plan budgets (ε per campaign) or shares, not both")
        for kind, mapping in (("budget", self.budgets), ("share", self.shares)):
            for name, value in mapping.items():
                if isinstance(value, bool) or not isinstance(value, int | float) \
                        or not (math.isfinite(value) and value >= 0):
                    raise ValueError(f"the plan's {kind} for {name!r} must be a finite number "
                                     f">= 0, got {value!r}")
        if self.unpinned is not None and not (math.isfinite(self.unpinned)
                                              and self.unpinned >= 0):
            raise ValueError("the plan's unpinned allowance must be a finite number >= 0")

    @classmethod
    def from_shares(cls, shares: Mapping[str, float], *,
                    unpinned: float | None = None) -> PrivacyPlan:
        return cls(shares=dict(shares), unpinned=unpinned)

    def resolve(self, lifetime: float, pinned: Collection[str], *,
                allow_unpinned: bool) -> Shares:
        """The ε of every pinned campaign and of the unpinned allowance; refuses a plan that
        names an unpinned campaign or spends more than the lifetime budget."""
        named = set(self.budgets) | set(self.shares)
        stray = sorted(named - set(pinned))
        if stray:
            raise ValueError(f"the privacy plan names {stray}, which are not pinned "
                             "(Client(campaigns=...)); unpinned campaigns share the plan's "
                             "unpinned allowance")
        if self.unpinned is not None:
            unpinned = self.unpinned if allow_unpinned else 0.0
        elif not allow_unpinned:
            unpinned = 0.0
        else:
            unpinned = lifetime * DEFAULT_UNPINNED_SHARE if pinned else lifetime
        unpinned = min(unpinned, lifetime)
        left = lifetime - unpinned if math.isfinite(lifetime) else math.inf
        if self.shares:
            missing = sorted(set(pinned) - set(self.shares))
            if missing:
                raise ValueError(f"the privacy plan gives shares but none for {missing}")
            total = sum(self.shares.values())
            budgets = {name: (left * self.shares[name] / total if total else 0.0)
                       for name in pinned}
        else:
            budgets = dict(self.budgets)
            rest = [name for name in pinned if name not in budgets]
            spare = left - sum(budgets.values())
            budgets.update((name, max(spare, 0.0) / len(rest)) for name in rest)
        spent = sum(budgets.values()) + unpinned
        if math.isfinite(lifetime) and spent > lifetime * (1 + 1e-9):
            raise ValueError(f"the privacy plan spends {spent:g} (pinned campaigns "
                             f"{sum(budgets.values()):g}, unpinned allowance {unpinned:g}), "
                             f"more than the lifetime budget of {lifetime:g}")
        return Shares(pinned=budgets, unpinned=unpinned)


@dataclass(frozen=True)
class CampaignPlan:
    """One campaign's part of this install's plan, as :meth:`Client.plan` shows it."""

    campaign: str
    pinned: bool
    budget: float  # ε this campaign may spend over the install's life (its share)
    epsilon: float  # per report
    reports: int  # reports the plan makes (drawn periods after the install arrived)
    periods: tuple[str, ...] | None  # UTC start dates of those periods; None: any time
    reported: int  # reports made so far under this plan
    forfeited: int  # drawn periods before the install first saw the campaign (never charged)
    reporting: str  # the whole plan in words

    @property
    def worst_case(self) -> float:
        """The most ε this plan can spend (reports × ε, within the campaign's share)."""
        return min(self.reports * self.epsilon, self.budget)


def basis_of(campaign: Campaign) -> str:
    """What a plan is drawn for: the campaign's calendar, ε and report count. A new config
    version with the same basis continues the plan; any other draws afresh."""
    return canonical_json({
        "epsilon": campaign.epsilon, "reports": campaign.reports_per_install,
        "schedule": None if campaign.schedule is None else campaign.schedule.to_json(),
    }).decode()


def draw_plan(campaign: Campaign, *, pool: str, budget: float, now: float,
              rng: RandomSource, spent: float, reserved: float,
              held: PlanRow | None = None) -> PlanRow:
    """A campaign's plan for its current version, drawn now.

    The reports are what the campaign's policy allows and what is left of its share pays for
    (the unpinned allowance less what other unpinned campaigns reserved). A campaign with a
    calendar draws them over its whole horizon and forfeits the periods already past (see
    :mod:`chorus_shared.schedule`). A later version with another basis (``held`` is the plan
    it replaces) draws again only what its share still pays for, so the plan never spends
    more than the share in all, and only over the periods after the latest one a report was
    asked in (``LONGITUDINAL.md`` §2.3: redraw the remaining reports over the remaining
    periods), so no period is reported twice and none reopens.
    """
    epsilon = campaign.epsilon
    available = budget - reserved if pool == "unpinned" else budget
    left = max(0.0, available - spent)
    # A per-day policy allows its count every day: only the share bounds the total.
    allowed = campaign.reports_per_install if campaign.policy.unit == "lifetime" else 10**6
    reports = min(allowed, _reports_paid(left, epsilon))
    schedule = campaign.schedule
    asked = None if held is None else held.asked
    if schedule is None:
        slots, first = None, 0
    elif asked is None:  # first sight: the whole horizon, periods already past forfeited
        reports = min(reports, schedule.periods)
        slots = draw_periods(rng, reports, schedule.periods)
        first = max(0, schedule.index(now))
    else:  # a new basis: what is left, over the periods after the latest one asked in
        first = max(0, schedule.index(now), schedule.index(asked) + 1)
        remaining = max(0, schedule.periods - first)
        reports = min(reports, remaining)
        slots = tuple(first + slot for slot in draw_periods(rng, reports, remaining))
    # An unpinned campaign reserves only what its plan may spend (or what it already spent
    # under an earlier basis), leaving the rest of the allowance to the others.
    limit = min(available, spent + reports * epsilon) if pool == "unpinned" else budget
    return PlanRow(campaign=campaign.name, pool=pool, basis=basis_of(campaign),
                   epsilon=epsilon, budget=limit, reports=reports, slots=slots, first=first,
                   asked=asked)


def _reports_paid(budget: float, epsilon: float) -> int:
    if budget <= 0:
        return 0
    return reports_within(budget, epsilon, 10**6)
