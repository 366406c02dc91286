"""A campaign's plan over time: how many reports one install makes, at what ε, and what each
period's estimate is then worth (docs/designing.md, "Over time").

The client spends the campaign's share B of an install's lifetime budget as r = ⌊B/ε⌋ reports
(at most one per period), in r of the horizon's T periods drawn once on the device, uniformly
over the whole horizon (``chorus_client.plan``). Each of the n installs active in a period
then reports in it with probability π = r/T, the period's reports number m ~ Binomial(n, π),
and its estimate has the exact variance (v̄ + S²)·E[1/m | m ≥ 1] − S²/n, with v̄ the
mechanism's noise per report and S² the spread of the values
(:func:`chorus_shared.schedule.sampled_variance`; LONGITUDINAL.md §1.3). P(m = 0) = (1 − π)^n.

Which ε per report: the variance per unit of budget is ε·(v̄_ε + S²), up to terms of order
1/(nπ)². It involves neither n, nor T, nor B, so neither does its minimum. For every mechanism
whose variance the designer knows that minimum lies above 2 at any share of the values but
one: dbitflip, whose sampling of buckets acts like extra spread, for a category held by more
than 0.29 to 0.36 of the installs (by the number of categories), where it falls to 1.0–2
(``tests/collector/design/test_planning.py``).
The client refuses a report above its ``max_epsilon``, 2 by default, so the best plan reports
at the cap: r = ⌈B/2⌉ reports of B/r each (:func:`~chorus_collector.design.request.
recommended_plan`). The recommendation is still read off the table (:func:`best_plan`), so
the corner case gets its own. Splitting the budget over every period (ε = B/T each) is the
other extreme, and the table shows what it costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from chorus_client.policy import DEFAULT_LIFETIME_BUDGET
from chorus_collector.design.amplification import shuffled_plan
from chorus_collector.design.request import PER_REPORT_CAP, DesignRequest, recommended_plan
from chorus_collector.design.variances import split_variance
from chorus_collector.results.estimates import Z95
from chorus_shared.campaign import Campaign
from chorus_shared.domain import NumericRange, NumericVector
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import REGISTRY
from chorus_shared.mechanisms.base import MIN_EPSILON
from chorus_shared.privacy import reports_within
from chorus_shared.schedule import expected_inverse_count

__all__ = ["EMPTY_LIMIT", "OPTIMUM", "TRIAL_EPSILONS", "best_plan", "inverse_count",
           "period_variance", "plan_over_time", "probability_below", "probability_empty"]

#: ε per report the table always compares (those up to the cap and the budget).
TRIAL_EPSILONS = (0.5, 1.0, 1.5, 2.0)
#: A plan that leaves more periods than this without a report, or without an estimate, is
#: warned about.
EMPTY_LIMIT = 0.01
#: Above this many expected reports, E[1/m] is its series: exact to 1 part in 10¹⁴, while
#: the exact sum would take seconds.
EXACT_COUNT_LIMIT = 10**7
#: P(m < min_batch_size) is summed term by term up to this batch size.
BELOW_TERMS_LIMIT = 100_000
OPTIMUM = ("The variance-optimal ε per report does not depend on the number of installs, the "
           "horizon or the budget: it minimises ε·(v̄ + S²), the variance per unit of budget, "
           "which involves only the mechanism and the spread of the values. For every "
           f"mechanism the designer can predict it lies above {PER_REPORT_CAP:g} (except "
           "dbitflip for a category held by more than about 0.3 of the installs), and the "
           "client "
           f"refuses reports above its max_epsilon, {PER_REPORT_CAP:g} by default: so the "
           f"best plan reports at the cap, r = ⌈share / {PER_REPORT_CAP:g}⌉ reports of "
           "ε = share / r each, at most one per period.")


def inverse_count(n: int, probability: float) -> float:
    """E[1/m | m ≥ 1] for m ~ Binomial(n, p): summed exactly, or by its series
    1/(np) + (1 − p)/(np)² beyond :data:`EXACT_COUNT_LIMIT` expected reports."""
    mean = n * probability
    if mean <= EXACT_COUNT_LIMIT:
        return expected_inverse_count(n, probability)
    return 1 / mean + (1 - probability) / mean**2


def period_variance(per_report: float, spread: float, n: int, probability: float) -> float:
    """(v̄ + S²)·E[1/m | m ≥ 1] − S²/n, with ``spread`` the values' variance over the n
    installs (÷ n; made the N − 1 form here)."""
    sample = spread * n / (n - 1) if n > 1 else 0.0
    return (per_report + sample) * inverse_count(n, probability) - sample / n


def probability_empty(n: int, probability: float) -> float:
    """P(m = 0) = (1 − π)^n: a period nobody reports in."""
    return 0.0 if probability >= 1 else math.exp(n * math.log1p(-probability))


def probability_below(n: int, probability: float, count: int) -> float | None:
    """P(m < count): a period whose estimate the collector refuses (fewer reports than
    min_batch_size). None for a count past :data:`BELOW_TERMS_LIMIT`."""
    if probability >= 1:
        return 1.0 if n < count else 0.0
    if count > BELOW_TERMS_LIMIT:
        return None
    log_p, log_q = math.log(probability), math.log1p(-probability)
    base = math.lgamma(n + 1)
    total = math.fsum(math.exp(base - math.lgamma(m + 1) - math.lgamma(n - m + 1)
                               + m * log_p + (n - m) * log_q) for m in range(min(count, n + 1)))
    return min(1.0, total)


def plan_over_time(request: DesignRequest, campaign: Campaign) -> dict[str, Any]:
    """The plan of a request with a schedule, for the campaign it would create (its
    mechanism, ε, policy and calendar): the trade-off table, the recommendation, the
    warnings, what each period's estimate means and the central ε a shuffler adds."""
    schedule, installs, policy = request.schedule, request.installs, request.policy
    assert schedule is not None and installs is not None and policy is not None
    periods, budget = schedule.periods, policy.budget
    reports = min(campaign.reports_per_install, periods)
    min_batch = campaign.min_batch_size
    quantity, frequency, scale = _quantity(request)

    def std_error(epsilon: float, count: int) -> float | None:
        return _std_error(request, campaign.mechanism.name, epsilon, count, frequency, scale)

    best_epsilon, best_reports = best_plan(budget, periods, std_error)
    options = []
    for epsilon, design in _trials(request.epsilon, budget, periods, best_epsilon):
        count = reports if math.isclose(epsilon, request.epsilon) else min(
            reports_within(budget, epsilon, 10**6), periods)
        probability = count / periods
        se = std_error(epsilon, count)
        options.append({
            "epsilon": epsilon, "design": design, "reports_per_install": count,
            "spent": count * epsilon, "expected_reports_per_period": installs * probability,
            "std_error": se, "ci_half_width": None if se is None else Z95 * se,
            "p_empty": probability_empty(installs, probability),
            "p_below_min_batch": probability_below(installs, probability, min_batch),
            "recommended": math.isclose(epsilon, best_epsilon),
            "chosen": math.isclose(epsilon, request.epsilon)})
    chosen = next(option for option in options if option["chosen"])
    notes = []
    if not math.isclose(best_epsilon, recommended_plan(budget, periods)[0]):
        notes.append(f"for {campaign.mechanism.name} at {quantity} the smallest standard error "
                     f"is at ε = {best_epsilon:.4g} per report ({best_reports} reports), below "
                     "the cap: the values' spread weighs more than the mechanism's noise here")
    return {
        "installs": installs, **schedule.to_json(), "budget": budget,
        "client_lifetime_budget": DEFAULT_LIFETIME_BUDGET, "cap": PER_REPORT_CAP,
        "epsilon": request.epsilon, "reports_per_install": reports,
        "reporting": campaign.reporting,
        "recommended_epsilon": best_epsilon, "recommended_reports": best_reports,
        "mechanism": campaign.mechanism.name, "quantity": quantity,
        "min_batch_size": min_batch, "options": options, "optimum": OPTIMUM,
        "estimand": (f"each period's estimate is {_subject(request)} among the installs active "
                     f"in that {schedule.cadence} (each reports in it with probability r/T = "
                     f"{reports}/{periods}; installs that arrive late or leave are counted "
                     "in the periods they are active)"),
        "warnings": _warnings(request, chosen, budget, min_batch, schedule.cadence),
        "notes": notes,
        "shuffling": shuffled_plan(campaign.epsilon, installs, reports, schedule,
                                   campaign.time_precision),
    }


def best_plan(budget: float, periods: int,
              std_error: Callable[[float, int], float | None]) -> tuple[float, int]:
    """(ε, r) of the smallest standard error among the plans that spend the whole share:
    r = ⌈B/cap⌉, ⌈B/cap⌉ + 1, … reports of B/r each, down to ε = 0.5 (at most T reports).
    That is the cap for every mechanism but one corner (module docstring); where the SE is
    not known (RAPPOR-like decoding), the cap."""
    best = recommended_plan(budget, periods)
    smallest = std_error(*best)
    if smallest is None:
        return best
    most = min(periods, reports_within(budget, TRIAL_EPSILONS[0], 10**6))
    for count in range(best[1] + 1, most + 1):
        epsilon = budget / count
        if epsilon < MIN_EPSILON:
            break
        se = std_error(epsilon, count)
        if se is not None and se < smallest * (1 - 1e-9):
            best, smallest = (epsilon, count), se
    return best


def _quantity(request: DesignRequest) -> tuple[str, float | None, float]:
    """(what the SE is of, the share it is at or None for a worst-case mean, its scale)."""
    domain = request.domain
    if isinstance(domain, NumericRange):
        return "mean (worst case)", None, (domain.hi - domain.lo) / 2
    if isinstance(domain, NumericVector):
        widest = max(range(domain.size), key=lambda i: domain.ranges[i].hi - domain.ranges[i].lo)
        bounds = domain.ranges[widest]
        return (f"mean of {domain.names[widest]} (worst case)", None,
                (bounds.hi - bounds.lo) / 2)
    return f"frequency = {request.frequency:g}", request.frequency, 1.0


def _subject(request: DesignRequest) -> str:
    return "the mean" if request.kind in ("numeric", "vector") else "each value's share"


def _trials(chosen: float, budget: float, periods: int,
            best: float) -> list[tuple[float, str]]:
    """The ε per report to compare, smallest first, each with its design: the round values
    up to the cap and the budget, the recommended and the requested ones, and splitting (the
    budget spread over every period, B/T each, where the client allows it)."""
    split = budget / periods
    values = [e for e in TRIAL_EPSILONS if e <= min(PER_REPORT_CAP, budget) * (1 + 1e-9)]
    values += [best, chosen]
    if MIN_EPSILON <= split <= PER_REPORT_CAP * (1 + 1e-9):
        values.append(split)
    trials: list[tuple[float, str]] = []
    for epsilon in sorted(values):
        if any(math.isclose(epsilon, e) for e, _ in trials):
            continue
        if math.isclose(epsilon, split):
            design = "splitting"
        elif reports_within(budget, epsilon, 10**6) >= periods:
            design = "every period"  # one report per period, spending less than the share
        else:
            design = "sampling"
        trials.append((epsilon, design))
    return trials


def _std_error(request: DesignRequest, mechanism_name: str, epsilon: float, reports: int,
               frequency: float | None, scale: float) -> float | None:
    """One period's standard error with ``reports`` per install at ε each (None where the
    mechanism's variance depends on more than the mechanism, or it has no resolution here)."""
    schedule, installs = request.schedule, request.installs
    assert schedule is not None and installs is not None
    if reports < 1:
        return None
    try:
        mechanism = REGISTRY[mechanism_name].resolve(epsilon=epsilon, domain=request.domain,
                                                      params={})
        parts = split_variance(mechanism, frequency)
    except CampaignError:  # not defined at this ε (e.g. too small for its parameters)
        return None
    if parts is None:
        return None
    return scale * math.sqrt(period_variance(*parts, installs, reports / schedule.periods))


def _warnings(request: DesignRequest, chosen: dict[str, Any], budget: float, min_batch: int,
              cadence: str) -> list[str]:
    warnings = []
    expected, empty = chosen["expected_reports_per_period"], chosen["p_empty"]
    below = chosen["p_below_min_batch"]
    if empty > EMPTY_LIMIT:
        warnings.append(f"{empty:.1%} of the {cadence}s are expected to have no report at all "
                        f"(P(empty) = (1 − r/T)^n): they will show no estimate")
    if expected < min_batch:
        warnings.append(f"a {cadence} expects {expected:.3g} reports, fewer than the "
                        f"campaign's min_batch_size ({min_batch}): the collector refuses "
                        f"estimates below it, so most {cadence}s will show nothing. More "
                        f"installs, a longer cadence, fewer periods or a larger share of the "
                        "budget would help")
    elif below is not None and below > EMPTY_LIMIT:
        warnings.append(f"{below:.1%} of the {cadence}s are expected to have fewer reports than "
                        f"min_batch_size ({min_batch}) and will show no estimate")
    if request.epsilon > PER_REPORT_CAP * (1 + 1e-9):
        warnings.append(f"ε = {request.epsilon:g} per report is above the client's default "
                        f"max_epsilon ({PER_REPORT_CAP:g}): default clients refuse the "
                        "campaign")
    if budget > DEFAULT_LIFETIME_BUDGET:
        warnings.append(f"a share of {budget:g} is more than the client's whole default "
                        f"lifetime budget ({DEFAULT_LIFETIME_BUDGET:g}, for all of the app's "
                        "campaigns together): an install's plan will give the campaign less")
    return warnings
