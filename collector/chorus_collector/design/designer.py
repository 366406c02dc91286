"""The campaign designer: what each mechanism would give for a planned campaign, before it
exists, and the campaign definition that creates it.

* :func:`design`: for the kind of data, its domain, ε and the users expected per time window,
  one row per applicable mechanism with the standard error of a frequency (at f → 0 and at a
  chosen f) or of a mean (the worst case over the range, in its units), the 95% interval
  half-width, the report size and a ``recommended`` flag; and how one install reports over
  time, as the client will: with a schedule, the plan over the horizon (``planning``: ε per
  report, reports per install, each period's standard error and chance of being empty, the
  central ε a shuffler adds).
* :func:`spec`: the definition for ``POST /v1/campaigns`` from the same request.
* :func:`simulate_design`: one simulated window of ``users`` reports drawn from a typed-in
  distribution, decoded by the real estimator, beside the true values and the predicted SE.

Variance model: i.i.d. sampling of users (``variances``), the one the estimators' standard
errors use, so the designer predicts the SE an analyst will read.
Inputs are JSON-like dicts and outputs ``to_json()``-able, for the dashboard's designer page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chorus_client.policy import DEFAULT_LIFETIME_BUDGET
from chorus_collector.design.planning import plan_over_time
from chorus_collector.design.request import KINDS, DesignRequest
from chorus_collector.design.simulation import (
    estimate_rows,
    simulate_window,
    true_values,
    unit_points,
)
from chorus_collector.design.variances import frequency_variance, mean_variance
from chorus_collector.results.estimates import CONFIDENCE, Z95
from chorus_shared.campaign import campaign_from_spec, privacy_warnings
from chorus_shared.compare import FREQUENCY_ORACLES, MEAN_MECHANISMS, VECTOR_MECHANISMS
from chorus_shared.domain import Categories, NumericRange, NumericVector
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import (
    REGISTRY,
    STRING_MECHANISMS,
    CountMeanSketch,
    Mechanism,
)
from chorus_shared.privacy import policy_from_json, reports_within
from chorus_shared.selection import choose_mechanism

__all__ = ["KINDS", "Design", "DesignRequest", "design", "frequency_variance",
           "mean_variance", "simulate_design", "spec"]

VARIANCE_MODEL = ("iid-sampling: users drawn at random, one report each per window; the "
                  "variance the estimators' standard errors estimate")
CANDIDATES = {"categories": FREQUENCY_ORACLES, "numeric": MEAN_MECHANISMS,
              "vector": VECTOR_MECHANISMS, "strings": STRING_MECHANISMS}
#: UTC days that one window of 30 days can touch (as 366 for 365 days).
DAYS_PER_30_DAY_WINDOW = 31
MEMOIZATION = ("not offered: every report is randomized afresh and charged its ε. Memoizing "
               "(one permanent answer per value, as RAPPOR does) would cap a constant value's "
               "loss at one report's ε however often it is sent, but the equality pattern of "
               "the values would leak beyond what is charged (docs/threat-model.md), so "
               "privacy.memoize is refused. To spend less over time, lower max_reports or the "
               "budget, or use unit 'lifetime'.")


@dataclass(frozen=True)
class Design:
    request: DesignRequest
    rows: list[dict[str, Any]]
    recommended: str
    privacy: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # with a schedule: the plan over time

    def spec(self, mechanism: str, name: str, **options: Any) -> dict[str, Any]:
        return spec(self.request, mechanism, name, **options)

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "kind": self.request.kind,
                "domain": self.request.domain.to_json(), "epsilon": self.request.epsilon,
                "users": self.request.users, "confidence": CONFIDENCE,
                "variance_model": VARIANCE_MODEL, "recommended": self.recommended,
                "rows": self.rows, "privacy": self.privacy, "notes": self.notes,
                "plan": self.plan}


def as_request(request: DesignRequest | Mapping[str, Any]) -> DesignRequest:
    return request if isinstance(request, DesignRequest) else DesignRequest.from_json(request)


def design(request: DesignRequest | Mapping[str, Any]) -> Design:
    """Every applicable mechanism's figures for this request (see the module docstring)."""
    request = as_request(request)
    rows: list[dict[str, Any]] = []
    notes: list[str] = privacy_warnings(request.epsilon)
    if request.kind in ("numeric", "vector"):
        notes.append("values outside [lo, hi] are clipped on the device, before any noise")
    for name in CANDIDATES[request.kind]:
        try:
            mechanism = REGISTRY[name].resolve(epsilon=request.epsilon, domain=request.domain,
                                               params={})
        except CampaignError as error:  # e.g. too many categories for d-bit reports
            notes.append(f"{name}: not applicable here ({error})")
            continue
        rows.append(_row(request, mechanism))
    if not rows:
        raise CampaignError("no mechanism applies to this design: " + "; ".join(notes[-4:]))
    recommended = _recommended(request, rows)
    for row in rows:
        row["recommended"] = row["mechanism"] == recommended
    privacy = privacy_over_time(request)
    plan = None
    if request.schedule is not None:
        campaign = campaign_from_spec(spec(request, recommended, "planned",
                                           accept_weak_privacy=True), warn=False)
        plan = plan_over_time(request, campaign)
        privacy["summary"] = campaign.reporting
        cadence = request.schedule.cadence
        expected = next(o for o in plan["options"] if o["chosen"])["expected_reports_per_period"]
        notes.append(f"the table above is for {request.users:,} reports per window; a "
                     f"{cadence} of the plan expects {expected:,.0f} (n·r/T), each install "
                     f"reporting at most once per {cadence}")
    elif privacy["reports_per_period"] > 1:
        notes.append(f"one install may send {privacy['reports_per_period']} reports per "
                     f"{privacy['period']}: the standard errors assume one report per user in "
                     "the window queried (more understate them), so query whole periods")
    return Design(request=request, rows=rows, recommended=recommended, privacy=privacy,
                  notes=notes, plan=plan)


def _row(request: DesignRequest, mechanism: Mechanism) -> dict[str, Any]:
    n = request.users
    figures = []
    if request.kind in ("categories", "strings"):
        for label, f in (("frequency → 0", 0.0), (f"frequency = {request.frequency:g}",
                                                  request.frequency)):
            figures.append(_figure(label, frequency_variance(mechanism, f), n, 1.0))
    elif isinstance(request.domain, NumericRange):
        scale = (request.domain.hi - request.domain.lo) / 2
        figures.append(_figure("mean (worst case)", mean_variance(mechanism), n, scale))
    else:
        assert isinstance(request.domain, NumericVector)
        variance = mean_variance(mechanism)
        for name, r in zip(request.domain.names, request.domain.ranges, strict=True):
            figures.append(_figure(f"mean of {name} (worst case)", variance, n,
                                   (r.hi - r.lo) / 2))
    # The headline: a rare category (what "auto" compares), or the least precise attribute.
    headline = figures[0] if request.kind in ("categories", "strings") else max(
        figures, key=lambda fig: fig["std_error"])
    row: dict[str, Any] = {
        "mechanism": mechanism.name, "params": mechanism.params(),
        "variance_per_user": headline["variance_per_user"],
        "std_error": headline["std_error"], "ci_half_width": headline["ci_half_width"],
        "report_bits": mechanism.report_bits, "report_bytes": math.ceil(
            mechanism.report_bits / 8), "figures": figures, "notes": _notes(request, mechanism)}
    if request.kind in ("categories", "strings"):
        row["std_error_at_frequency"] = figures[1]["std_error"]
        row["ci_half_width_at_frequency"] = figures[1]["ci_half_width"]
    return row


def _figure(quantity: str, variance: float | None, n: int, scale: float) -> dict[str, Any]:
    """n·Var on the [−1, 1] (or frequency) scale → SE and interval in the quantity's units."""
    if variance is None:
        return {"quantity": quantity, "variance_per_user": None, "std_error": None,
                "ci_half_width": None}
    std_error = scale * math.sqrt(variance / n)
    return {"quantity": quantity, "variance_per_user": variance, "std_error": std_error,
            "ci_half_width": Z95 * std_error}


def _notes(request: DesignRequest, mechanism: Mechanism) -> list[str]:
    notes = []
    if request.kind == "strings":
        if frequency_variance(mechanism, 0.0) is None:
            notes.append("the standard error depends on the candidates decoded against (least "
                         "squares over cohorts × bits): simulate with a distribution to see it")
        cells = getattr(mechanism, "k", 0) * getattr(mechanism, "m", 0)
        if isinstance(mechanism, CountMeanSketch):
            notes.append("unbiased on average over the hash functions; a candidate also "
                         "counts the values that collide with it")
        elif request.candidates is not None and cells and request.candidates > cells:
            notes.append(f"{request.candidates} candidates exceed the {cells} cohort × bit "
                         "cells: not all can be told apart (raise k or m)")
    return notes


def _recommended(request: DesignRequest, rows: list[dict[str, Any]]) -> str:
    """What ``mechanism: "auto"`` picks for categories; else the least variance (ties: the
    shorter report)."""
    if isinstance(request.domain, Categories):
        chosen, _ = choose_mechanism(request.epsilon, request.domain, {})
        return chosen
    known = [r for r in rows if r["variance_per_user"] is not None] or rows
    best = min(known, key=lambda r: (r["variance_per_user"] or 0.0, r["report_bits"]))
    return str(best["mechanism"])


def privacy_over_time(request: DesignRequest) -> dict[str, Any]:
    """The most ε one install can spend on the campaign, per period and over time, and how
    it reports as the client will: the campaign's own policy, then the client's lifetime
    budget, which stops every install once spent."""
    policy = request.policy or policy_from_json(None, request.epsilon)
    worst = policy.worst_case(request.epsilon)
    daily = policy.unit == "day"
    # What one install can send before the client's default lifetime budget is gone (if the
    # app gave this campaign all of it).
    lifetime_reports = reports_within(DEFAULT_LIFETIME_BUDGET, request.epsilon, 10**6)
    client_reports = min(lifetime_reports, 10**6 if daily else worst.reports_per_period)
    return {
        "policy": policy.to_json(),
        "per_report": worst.per_report,
        "reports_per_period": worst.reports_per_period,
        "per_period": worst.per_period,
        "period": "UTC day" if daily else "lifetime of the install",
        # The campaign's own bounds: a lifetime budget may all be spent on one day.
        "per_utc_day": worst.per_period,
        "per_30_days": worst.per_period * (DAYS_PER_30_DAY_WINDOW if daily else 1),
        "per_365_days": worst.per_year,
        "client_lifetime_budget": DEFAULT_LIFETIME_BUDGET,
        "reports_per_install": client_reports,
        "per_install": min(client_reports * request.epsilon, DEFAULT_LIFETIME_BUDGET),
        "summary": _reporting_summary(worst.per_report, worst.reports_per_period, daily,
                                      client_reports),
        "memoization": MEMOIZATION,
    }


def _reporting_summary(epsilon: float, per_period: int, daily: bool,
                       client_reports: int) -> str:
    """How one install reports without a schedule, the client's lifetime budget included."""
    noun = "report" if per_period == 1 else "reports"
    budget = (f"the client's lifetime budget ({DEFAULT_LIFETIME_BUDGET:g} by default, for all "
              "of the app's campaigns together)")
    if daily:
        return (f"each report spends ε = {epsilon:g}; the campaign allows {per_period} {noun} "
                f"per install per UTC day, but {budget} stops an install after "
                f"{client_reports} reports in all: without a schedule an install reports on its "
                "first days and is then silent for good, so later days hear only from installs "
                "that arrived later. Give the campaign a schedule to spread each install's "
                "reports over its horizon")
    return (f"each report spends ε = {epsilon:g}; one install sends at most {client_reports} "
            f"{'report' if client_reports == 1 else 'reports'} in its lifetime "
            f"({client_reports * epsilon:g} in all, within {budget}), the first times the app "
            "reports: without a schedule nothing spreads them over time")


def spec(request: DesignRequest | Mapping[str, Any], mechanism: str, name: str, *,
         description: str = "", accept_weak_privacy: bool = False) -> dict[str, Any]:
    """The campaign definition for ``POST /v1/campaigns`` (admin): this request's domain, ε,
    privacy policy and time precision with ``mechanism`` (a row's name, or ``"auto"`` for
    categories). Checked by :func:`~chorus_shared.campaign.campaign_from_spec` before it is
    returned, so a definition that would be refused fails here with the same message."""
    request = as_request(request)
    if mechanism != "auto" and mechanism not in CANDIDATES[request.kind]:
        raise CampaignError(f"mechanism {mechanism!r} is not one the designer offers for "
                            f"{request.kind}: {list(CANDIDATES[request.kind])}")
    body: dict[str, Any] = {"name": name, "mechanism": mechanism,
                            "epsilon": request.epsilon, "domain": request.domain.to_json()}
    if description:
        body["description"] = description
    if request.policy is not None:
        body["privacy"] = request.policy.to_json()
    if request.time_precision is not None:
        body["time_precision"] = request.time_precision
    if request.schedule is not None:
        body["schedule"] = request.schedule.to_json()
    if request.min_batch_size is not None:
        body["min_batch_size"] = request.min_batch_size
    if accept_weak_privacy:
        body["accept_weak_privacy"] = True
    campaign_from_spec(body, warn=False, require_consent=True)
    return body


def simulate_design(request: DesignRequest | Mapping[str, Any], mechanism: str,
                    seed: int = 0) -> dict[str, Any]:
    """One simulated window: ``users`` reports (at most 10^6 and 64 million reported bits;
    20,000 where only the client's Python randomizer has the mechanism) from the request's
    distribution, decoded by the real estimator. Each row: the true value, the estimate with
    its SE and 95% interval, and the SE this module predicts for that distribution at the
    simulated number of users."""
    request = as_request(request)
    distribution = request.distribution
    if distribution is None:
        raise CampaignError("a simulation needs a distribution (what the users hold)")
    if mechanism == "auto":
        mechanism = design(request).recommended
    campaign = campaign_from_spec(spec(request, mechanism, "designer-simulation",
                                       accept_weak_privacy=True), warn=False)
    window = simulate_window(request, campaign, distribution, seed)
    predicted = _predicted_std_errors(request, campaign.mechanism, window.users)
    rows = estimate_rows(window.result)
    truth = true_values(request, distribution)
    for row, true, std_error in zip(rows, truth, predicted, strict=True):
        row["true"] = true
        row["predicted_std_error"] = std_error
    notes = []
    if window.users < request.users:
        notes.append(f"simulated {window.users} users, not {request.users} (the most the "
                     f"{window.simulator} draws for {mechanism} here, to answer in seconds): "
                     f"the standard errors shown are for "
                     f"{window.users}; at {request.users} they shrink by √({window.users}/"
                     f"{request.users}) = {math.sqrt(window.users / request.users):.3g}")
    return {"mechanism": campaign.mechanism.name, "kind": request.kind,
            "epsilon": request.epsilon, "users": request.users,
            "simulated_users": window.users, "simulator": window.simulator, "seed": seed,
            "confidence": CONFIDENCE, "variance_model": window.result.variance_model,
            "estimates": rows, "notes": notes}


def _predicted_std_errors(request: DesignRequest, mechanism: Mechanism,
                          users: int) -> list[float | None]:
    """The SE of each estimate for this distribution, i.i.d. model, at ``users`` reports."""
    distribution = request.distribution
    assert distribution is not None
    truth = true_values(request, distribution)
    if request.kind in ("categories", "strings"):
        variances = [frequency_variance(mechanism, f) for f in truth]
        return [None if v is None else math.sqrt(v / users) for v in variances]
    points = unit_points(request, distribution)
    weights = list(distribution.weights)
    domain = request.domain
    ranges = [domain] if isinstance(domain, NumericRange) else list(
        domain.ranges)  # type: ignore[union-attr]
    columns = [points.tolist()] if points.ndim == 1 else points.T.tolist()
    return [(r.hi - r.lo) / 2 * math.sqrt(mean_variance(mechanism, column, weights) / users)
            for r, column in zip(ranges, columns, strict=True)]
