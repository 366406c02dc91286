"""The privacy policy of a campaign, and the worst-case loss it allows.

The privacy unit is one person, approximated by one install. Every report is randomized afresh
and charged the ε of one report, whatever the value: the charge, and so whether a report fits
the budget, depends only on how many reports were made, never on the value (a value-dependent
charge would make the presence of a report reveal the value). Per period (the install's
lifetime, or one UTC day as Apple does) a campaign allows at most ``budget`` ε and
``max_reports`` reports; the client adds its own caps across periods and across campaigns.

Why no memoization: RAPPOR-style memoization (a permanent response per value, fresh noise on
top) makes an install's reports correlated exactly when its value repeats. The equality
pattern of the value sequence then leaks beyond what the ledger charges: for RAPPOR with
k = 8, h = 1, f = 0.5, two reports of the same value against two different values differ by a
log-likelihood ratio of 2.97, above the 2·ε₁ = 2.04 charged and above ε∞ = 2.20
(``tests/client/test_threat_model.py`` enumerates it). Fresh randomization composes exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from chorus_shared.errors import CampaignError

__all__ = ["DAYS_PER_YEAR_WINDOW", "PrivacyPolicy", "WorstCase", "fits", "policy_from_json",
           "reports_within"]

Unit = Literal["lifetime", "day"]
DEFAULT_MAX_REPORTS = 1000
# Any window of 365 days touches at most 366 UTC days.
DAYS_PER_YEAR_WINDOW = 366
# Float slack so that n reports of ε fit a budget of exactly n·ε.
_SLACK = 1e-9


@dataclass(frozen=True)
class WorstCase:
    """The most ε one install can spend on one campaign, whatever its values."""

    per_report: float
    reports_per_period: int
    per_period: float
    per_year: float  # in any window of 365 days

    def to_json(self) -> dict[str, Any]:
        return {"per_report": self.per_report, "reports_per_period": self.reports_per_period,
                "per_period": self.per_period, "per_365_days": self.per_year}


@dataclass(frozen=True)
class PrivacyPolicy:
    unit: Unit
    budget: float
    max_reports: int

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "budget": self.budget, "max_reports": self.max_reports}

    def period(self, unix_seconds: float) -> str:
        """The key of the period a report at this time is charged to."""
        if self.unit == "lifetime":
            return "lifetime"
        return f"day-{int(unix_seconds // 86400)}"

    def reports_per_period(self, epsilon: float) -> int:
        """How many reports of ε fit one period: a count fixed in advance, value-free.

        The client enforces exactly this count, so what a campaign publishes as its worst case
        and what its clients spend cannot disagree at a budget boundary.
        """
        return reports_within(self.budget, epsilon, self.max_reports)

    def describe(self, epsilon: float) -> str:
        """How many reports one install makes, in words (without a calendar)."""
        reports = self.reports_per_period(epsilon)
        noun = "report" if reports == 1 else "reports"
        if self.unit == "lifetime":
            return (f"at most {reports} {noun} per install, ever, at ε = {epsilon:.3g} each "
                    f"({reports * epsilon:.3g} in all), sent as the app reports")
        return (f"at most {reports} {noun} per install per UTC day at ε = {epsilon:.3g} each, "
                "until the install's lifetime budget is spent")

    def worst_case(self, epsilon: float) -> WorstCase:
        reports = self.reports_per_period(epsilon)
        per_period = reports * epsilon
        periods = 1 if self.unit == "lifetime" else DAYS_PER_YEAR_WINDOW
        return WorstCase(per_report=epsilon, reports_per_period=reports,
                         per_period=per_period, per_year=per_period * periods)


def fits(spent: float, cost: float, budget: float) -> bool:
    """``spent + cost <= budget``, with a relative slack for sums of equal float costs."""
    return spent + cost <= budget * (1 + _SLACK) + _SLACK * cost


def reports_within(budget: float, epsilon: float, cap: int) -> int:
    """The most reports of ε that fit ``budget`` (by the same slack as :func:`fits`), at most
    ``cap``; without overflow for huge budgets."""
    ratio = (budget * (1 + _SLACK) + _SLACK * epsilon) / epsilon
    return cap if not ratio < cap else int(ratio)


def policy_from_json(obj: object, epsilon: float) -> PrivacyPolicy:
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise CampaignError("privacy must be an object")
    if "memoize" in obj:
        raise CampaignError(
            "privacy.memoize is not supported: every report is randomized afresh and charged "
            "its ε, because memoized responses leak the pattern of value changes (see "
            "docs/threat-model.md)")
    unknown = set(obj) - {"unit", "budget", "max_reports"}
    if unknown:
        raise CampaignError(f"unknown privacy fields: {sorted(unknown)}")
    unit = obj.get("unit", "lifetime")
    if unit not in ("lifetime", "day"):
        raise CampaignError("privacy.unit must be 'lifetime' or 'day'")
    budget = obj.get("budget", epsilon)
    if isinstance(budget, bool) or not isinstance(budget, int | float) \
            or not math.isfinite(budget) or reports_within(budget, epsilon, 1) < 1:
        raise CampaignError(
            f"privacy.budget must be a finite number of at least one report's ε "
            f"({epsilon:.6g}), got {budget!r}"
        )
    # By default a policy allows exactly the reports its budget pays for, so that what the
    # config shows is what one install does (1 report for the default budget of one ε).
    max_reports = obj.get("max_reports", reports_within(budget, epsilon, DEFAULT_MAX_REPORTS))
    if isinstance(max_reports, bool) or not isinstance(max_reports, int) \
            or not 1 <= max_reports <= 10**6:
        raise CampaignError("privacy.max_reports must be an integer in [1, 1000000]")
    return PrivacyPolicy(unit=unit, budget=float(budget), max_reports=max_reports)
