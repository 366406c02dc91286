"""The central ε a shuffler adds to a plan over time (docs/shuffler.md, "Over a campaign's
horizon").

Per period: the shuffler releases one campaign's reports of one time bucket as a shuffled
batch, and m reports of one ε₀-LDP randomizer shuffled together are (ε, δ)-DP for any one
install's value (Feldman, McMillan, Talwar, FOCS 2021: the closed form, and the collector's
numerical bound where m is small enough to compute it in well under a second). The batch is
taken at the expected size: n·r/T reports per period, shared among the period's time buckets
when those are shorter than the period.

Over the horizon, for one install, "case K": the install is in the r batches of the periods it
reports in, and r × the per-period figure (basic composition, δ adding up likewise) bounds its
loss even when the collector can tell who reported in which period.

What is deliberately not given: a figure amplified by the schedule's sampling of installs.
Each install reports in r of the T periods drawn together (random allocation), not in each
period independently; composing per-period subsampling bounds is not valid for such a
schedule, and a bound for random allocation (Feldman and Shenfeld, 2025) is not implemented.
"""

from __future__ import annotations

import math
from typing import Any

from chorus_collector.ingest.shuffling import SOURCE, default_delta, numerical_epsilon
from chorus_shared.schedule import Schedule
from chorus_shared.shuffling import fmt_closed_form

__all__ = ["NOT_GIVEN", "NUMERICAL_LIMIT", "SHUFFLER_MIN_BATCH", "period_central",
           "shuffled_plan"]

#: Batches up to this size also get the numerical bound (about half a second at the limit);
#: larger ones the closed form, which is then already small.
NUMERICAL_LIMIT = 250_000
#: Below 1% less than ε₀ is no amplification worth stating (as docs/shuffler.md's table says).
NEGLIGIBLE = 0.99
#: The shuffler's default MIN_BATCH: a smaller group is never forwarded.
SHUFFLER_MIN_BATCH = 1000
NOT_GIVEN = ("No figure amplified by the schedule's sampling of installs is given: each "
             "install reports in r of the T periods drawn together (random allocation), not in "
             "each period independently, and composing per-period subsampling bounds is not "
             "valid for such a schedule (a bound for random allocation, Feldman and Shenfeld "
             "2025, is not implemented). The horizon figure is case K only.")


def period_central(epsilon0: float, batch: int, delta: float | None = None) -> dict[str, Any]:
    """The central (ε, δ) of one shuffled batch of ``batch`` reports at ε₀: the closed form,
    the numerical bound (batches up to :data:`NUMERICAL_LIMIT`) and the smaller of the two,
    never above ε₀. δ: min(1/m², 10⁻⁶) unless given, as the collector states its estimates."""
    chosen_delta = default_delta(batch) if delta is None else delta
    closed = fmt_closed_form(epsilon0, batch, chosen_delta)
    numerical = numerical_epsilon(epsilon0, batch, chosen_delta) \
        if batch <= NUMERICAL_LIMIT else None
    epsilon = min(epsilon0, closed, math.inf if numerical is None else numerical)
    bound = ("none" if epsilon >= epsilon0 else "numerical"
             if numerical is not None and numerical <= closed else "closed-form")
    return {"epsilon": epsilon, "delta": chosen_delta, "batch": batch, "bound": bound,
            "amplified": epsilon < NEGLIGIBLE * epsilon0,
            "closed_form_epsilon": closed, "numerical_epsilon": numerical,
            "epsilon0": epsilon0}


def shuffled_plan(epsilon0: float, installs: int, reports: int, schedule: Schedule,
                  time_precision: int, delta: float | None = None) -> dict[str, Any]:
    """Per period and, case K, over the horizon for one install (module docstring), with
    the assumptions each figure needs."""
    per_period = installs * reports / schedule.periods
    buckets = max(1, schedule.seconds // time_precision)
    batch = math.floor(per_period / buckets)
    body: dict[str, Any] = {"expected_reports_per_period": per_period,
                            "buckets_per_period": buckets, "batch": batch,
                            "source": SOURCE, "not_given": NOT_GIVEN}
    if batch < 1:
        body.update(period=None, horizon=None, assumptions=[], summary=(
            f"a batch would hold {per_period / buckets:.3g} reports on average: no "
            "amplification to state"))
        return body
    period = period_central(epsilon0, batch, delta)
    horizon = {"epsilon": reports * period["epsilon"], "delta": reports * period["delta"],
               "reports": reports, "rule": (
                   f"case K: r × the per-period figure (basic composition over the {reports} "
                   "batches one install is in), valid even when the collector can tell who "
                   "reported in which period")}
    body.update(period=period, horizon=horizon,
                assumptions=_assumptions(epsilon0, reports, per_period, buckets, batch,
                                         schedule.cadence),
                summary=_summary(period, horizon, schedule.cadence))
    return body


def _summary(period: dict[str, Any], horizon: dict[str, Any], cadence: str) -> str:
    if not period["amplified"]:
        return (f"no amplification: a batch of {period['batch']:,} reports at ε₀ = "
                f"{period['epsilon0']:g} is too small for the bounds to lower ε by even 1% "
                f"(ε = {period['epsilon']:.4g} at δ = {period['delta']:.2g}), so the central "
                "ε is in effect the local one")
    return (f"per {cadence}: ε = {period['epsilon']:.3g} at δ = {period['delta']:.2g} for a "
            f"batch of {period['batch']:,} reports ({period['bound']} bound; closed form "
            f"{period['closed_form_epsilon']:.3g}); over the horizon for one install (case K, "
            f"{horizon['reports']} × per {cadence}): ε = {horizon['epsilon']:.3g} at "
            f"δ = {horizon['delta']:.2g}")


def _assumptions(epsilon0: float, reports: int, per_period: float, buckets: int, batch: int,
                 cadence: str) -> list[str]:
    size = (f"A batch is one {cadence}'s reports: {per_period:,.0f} expected (n·r/T)"
            if buckets == 1 else
            f"A batch is one time bucket's reports: the shuffler groups by bucket, and a "
            f"{cadence} has {buckets}, so {per_period:,.0f} expected reports per {cadence} make "
            f"batches of about {batch:,} if the app reports evenly across them (a time "
            f"precision of one {cadence} would make one batch per {cadence})")
    assumptions = [
        f"{size}. A batch with fewer reports has a larger ε; the estimates state the figure "
        "of the batches actually received.",
        "No injected reports: every report in a batch comes from a distinct enrolled install "
        "(the shuffler's admission control vouches for the count; without it, anyone who can "
        "post to the shuffler, the collector included, can shrink the crowd).",
        "The shuffler and the collector do not collude: the shuffler permutes every batch "
        "uniformly and strips addresses, arrival times and any per-install label.",
        f"Every report in a batch comes from the same randomizer at the same ε₀ = "
        f"{epsilon0:g} (the campaign's).",
        f"The local guarantee holds regardless: one install spends at most r·ε₀ = "
        f"{reports * epsilon0:g} on this campaign, whatever the shuffler does; the central "
        "figures are in addition to it, never instead.",
    ]
    if batch < SHUFFLER_MIN_BATCH:
        assumptions.append(f"Batches of {batch:,} are below the shuffler's default MIN_BATCH "
                           f"({SHUFFLER_MIN_BATCH:,}): it forwards no smaller group, so lower "
                           "MIN_BATCH or these reports wait until they expire.")
    return assumptions
