"""Evaluating alert rules as new reports fold: one decision per rule and window end.

The folder that holds the fold lease calls :func:`evaluate_campaigns` after a run that folded
reports of some campaigns (``jobs/folding.py``). For each rule of those campaigns the windows
end at the start of the bucket now running, so they cover whole buckets and move once per
bucket: a rule is evaluated at most once per time bucket of its campaign, and only for an end
past the last one it decided (``StoredAlertRule.last_end``).

An evaluation compares the windows (``analysis.compare``), re-adjusts the p-values of the
values the rule tests across exactly those values, and compares the significant ones with the
rule's state: a value that turns significant raises a "triggered" notification; one that stops
being so is cleared (and notified as "resolved" if the rule asks). The decision, the state and
the notifications commit in one transaction by compare-and-set on the rule's last end
(:meth:`Storage.commit_alert_evaluation`): a second folder, a second replica or a restart that
evaluates the same end changes nothing and sends nothing. A window the comparison cannot
answer (too few reports, say) is recorded as the rule's ``last_error`` and changes no state.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from chorus_collector.alerts.rules import dashboard_link, takes_candidates
from chorus_collector.analysis.compare import ComparisonRow, adjusted_p_values, compare_windows
from chorus_collector.problems import Problem
from chorus_collector.storage import (
    AlertEvaluation,
    NewFiring,
    Storage,
    StoredAlertRule,
    StoredCampaign,
)

__all__ = ["PAYLOAD_TYPE", "evaluate_campaigns", "evaluate_rule", "rule_windows"]

log = logging.getLogger("chorus.alerts")

PAYLOAD_TYPE = "chorus.alert"
Window = tuple[int, int]


def rule_windows(window: int, precision: int, now: float) -> tuple[Window, Window]:
    """(baseline, current): the last ``window`` seconds of whole buckets before the bucket
    now running, and the ``window`` before them."""
    end = int(now // precision) * precision
    return (end - 2 * window, end - window), (end - window, end)


def evaluate_rule(storage: Storage, rule: StoredAlertRule, stored: StoredCampaign, now: float,
                  public_url: str | None,
                  new_key: Callable[[], str] = lambda: uuid.uuid4().hex,
                  ) -> AlertEvaluation | None:
    """What evaluating ``rule`` now decides (None: its windows' end was decided before, or
    they would start before 1970), not yet committed."""
    d = rule.definition
    baseline, current = rule_windows(d["window"], stored.campaign.time_precision, now)
    state = storage.alert_state(rule.id)
    if current[1] <= state.last_end or baseline[0] < 0:
        return None
    takes = set(d["values"]) if d["values"] else None
    candidates = d["values"] if takes_candidates(stored) else ()
    try:
        result = compare_windows(storage, stored, baseline=baseline, current=current,
                                 candidates=candidates, correction=d["correction"],
                                 alpha=d["alpha"])
    except Problem as problem:
        return AlertEvaluation(rule.id, state.last_end, current[1], now,
                               error=f"{problem.kind}: {problem.detail or problem.title}")
    rows = [row for row in result.rows if takes is None or row.value in takes]
    adjusted = adjusted_p_values([math.nan if r.p_value is None else r.p_value for r in rows],
                                 d["correction"])
    figures = {row.value: _figures(row, p) for row, p in zip(rows, adjusted, strict=True)}
    significant = {value for value, f in figures.items() if _significant(f, d)}
    raised = sorted(significant - set(state.active))
    cleared = sorted(set(state.active) - significant)
    context = {"rule": rule, "stored": stored, "now": now, "public_url": public_url,
               "baseline": {**result.baseline}, "current": {**result.current},
               "tested": len(rows), "significant": sorted(significant)}
    firings = []
    if raised:
        firings.append(_firing("triggered", new_key(), [figures[v] for v in raised], context))
    if cleared and d["resolved"]:
        firings.append(_firing("resolved", new_key(),
                               [figures.get(v, {"value": v}) for v in cleared], context))
    return AlertEvaluation(rule.id, state.last_end, current[1], now, raised, cleared, firings)


def _figures(row: ComparisonRow, adjusted: float) -> dict[str, Any]:
    return {"value": row.value, "baseline_estimate": row.baseline_estimate,
            "current_estimate": row.current_estimate, "difference": row.difference,
            "std_error": row.std_error, "ci_low": row.ci_low, "ci_high": row.ci_high,
            "p_value": row.p_value,
            "adjusted_p_value": adjusted if math.isfinite(adjusted) else None}


def _significant(figures: dict[str, Any], definition: dict[str, Any]) -> bool:
    p, difference = figures["adjusted_p_value"], figures["difference"]
    return p is not None and p < definition["alpha"] and difference is not None \
        and abs(difference) >= definition["min_change"]


def _firing(event: str, key: str, values: list[dict[str, Any]],
            context: dict[str, Any]) -> NewFiring:
    rule: StoredAlertRule = context["rule"]
    stored: StoredCampaign = context["stored"]
    d = rule.definition
    baseline, current = context["baseline"], context["current"]
    link = dashboard_link(context["public_url"], stored, (baseline["start"], baseline["end"]),
                          (current["start"], current["end"]), d["correction"], d["values"])
    body = {
        "type": PAYLOAD_TYPE, "event": event, "idempotency_key": key,
        "rule": {"name": rule.name, "window": d["window"], "values": d["values"],
                 "min_change": d["min_change"], "resolved": d["resolved"]},
        "campaign": stored.campaign.name, "evaluated_at": context["now"],
        "baseline": baseline, "current": current, "correction": d["correction"],
        "alpha": d["alpha"], "tested": context["tested"], "confidence": 0.95,
        "values": values, "significant": context["significant"], "link": link,
        "summary": _summary(event, stored.campaign.name, d["window"], values)}
    return NewFiring(event, key, json.dumps(body, allow_nan=False))


def _summary(event: str, campaign: str, window: int, values: list[dict[str, Any]]) -> str:
    """One line a chat channel can show as it is."""
    def change(f: dict[str, Any]) -> str:
        if f.get("difference") is None:
            return f"{f['value']} (no estimate)"
        return (f"{f['value']} {f['baseline_estimate']:.4g} → {f['current_estimate']:.4g} "
                f"({f['difference']:+.4g}, adjusted p {f['adjusted_p_value']:.2g})")
    what = "changed significantly" if event == "triggered" else "no longer differs"
    span = _duration(window)
    return (f"{campaign}: {len(values)} value{'s' if len(values) != 1 else ''} {what} "
            f"(the last {span} against the {span} before): "
            + "; ".join(change(f) for f in values))


def _duration(seconds: int) -> str:
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def evaluate_campaigns(storage: Storage, campaign_ids: Iterable[int], now: float,
                       public_url: str | None) -> int:
    """Evaluate and commit the rules of these campaigns (after a fold that brought them new
    reports); how many evaluations committed. A rule whose evaluation fails is logged (by its
    name: never its webhook) and retried after the next fold; an outage is raised."""
    committed = 0
    for rule in storage.alert_rules(campaign_ids):
        try:
            stored = storage.get_campaign_by_id(rule.campaign_id)
            evaluation = evaluate_rule(storage, rule, stored, now, public_url)
            if evaluation is not None and storage.commit_alert_evaluation(evaluation):
                committed += 1
                if evaluation.firings:
                    log.info("alert %s: %s", rule.name, ", ".join(
                        f"{f.event} ({f.key})" for f in evaluation.firings))
        except Exception as error:
            if storage.unavailable(error):
                raise
            log.exception("evaluating the alert rule %s failed; it is tried again after the "
                          "next fold", rule.name)
    return committed
