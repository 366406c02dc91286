"""The privacy policy of a campaign: what one install may spend, and how repeats are charged.

The privacy unit is one person, approximated by one install: everything it reports to a
campaign within a unit period (its lifetime, or one UTC day as Apple does) must fit in the
campaign's ``budget``, and at most ``max_reports`` reports are sent per period.

With ``memoize`` on, the randomized response to a value is a deterministic function of (the
install's secret, the campaign, the value): RAPPOR's permanent randomized response, made
general. Reporting the same value again then reveals nothing new, so it is charged by the
mechanism's longitudinal bound (:meth:`Mechanism.memo_cumulative`): once ε for a fully
memoized response; min(r·ε₁, ε∞) over r reports for RAPPOR, whose instantaneous response is
drawn afresh each time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import Mechanism

__all__ = ["PrivacyPolicy", "policy_from_json", "report_cost"]

Unit = Literal["lifetime", "day"]
DEFAULT_MAX_REPORTS = 1000


@dataclass(frozen=True)
class PrivacyPolicy:
    unit: Unit
    budget: float
    max_reports: int
    memoize: bool

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "budget": self.budget, "max_reports": self.max_reports,
                "memoize": self.memoize}

    def period(self, unix_seconds: float) -> str:
        """The key of the period a report at this time is charged to."""
        if self.unit == "lifetime":
            return "lifetime"
        return f"day-{int(unix_seconds // 86400)}"


def default_budget(mechanism: Mechanism, memoize: bool) -> float:
    """One value reported any number of times, where that is finite; else one report."""
    if memoize:
        forever = mechanism.memo_cumulative(math.inf)
        if math.isfinite(forever):
            return max(forever, mechanism.epsilon)
    return mechanism.epsilon


def policy_from_json(obj: object, mechanism: Mechanism) -> PrivacyPolicy:
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise CampaignError("privacy must be an object")
    unknown = set(obj) - {"unit", "budget", "max_reports", "memoize"}
    if unknown:
        raise CampaignError(f"unknown privacy fields: {sorted(unknown)}")
    unit = obj.get("unit", "lifetime")
    if unit not in ("lifetime", "day"):
        raise CampaignError("privacy.unit must be 'lifetime' or 'day'")
    memoize = obj.get("memoize", True)
    if not isinstance(memoize, bool):
        raise CampaignError("privacy.memoize must be true or false")
    budget = obj.get("budget", default_budget(mechanism, memoize))
    if isinstance(budget, bool) or not isinstance(budget, int | float) \
            or not math.isfinite(budget) or budget < mechanism.epsilon:
        raise CampaignError(
            f"privacy.budget must be a finite number of at least one report's ε "
            f"({mechanism.epsilon:.6g}), got {budget!r}"
        )
    max_reports = obj.get("max_reports", DEFAULT_MAX_REPORTS)
    if isinstance(max_reports, bool) or not isinstance(max_reports, int) \
            or not 1 <= max_reports <= 10**6:
        raise CampaignError("privacy.max_reports must be an integer in [1, 1000000]")
    return PrivacyPolicy(unit=unit, budget=float(budget), max_reports=max_reports,
                         memoize=memoize)


def report_cost(mechanism: Mechanism, memoize: bool, earlier_reports_of_value: int) -> float:
    """ε charged for one more report of a value already reported ``earlier`` times."""
    if not memoize:
        return mechanism.epsilon
    r = earlier_reports_of_value
    return mechanism.memo_cumulative(r + 1) - mechanism.memo_cumulative(r)
