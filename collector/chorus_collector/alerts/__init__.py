"""Alerts: rules that notify a webhook when a window comparison turns significant.

* ``rules``: a rule's definition, checked (values, windows, correction, webhook, secret),
  and how the API shows it;
* ``evaluate``: one decision per rule and window end, after folds, committed with its state
  and its notifications;
* ``deliver``: the notification outbox, posted at least once, signed, retried with backoff;
* ``work``: what a folder runs for them (``AlertWork``).

docs/alerts.md is the guide.
"""

from __future__ import annotations

from chorus_collector.alerts.deliver import SIGNATURE_HEADER, deliver_due, signature
from chorus_collector.alerts.evaluate import evaluate_campaigns, evaluate_rule, rule_windows
from chorus_collector.alerts.rules import (
    RuleDefinition,
    dashboard_link,
    rule_definition,
    rule_json,
    webhook_origin,
)
from chorus_collector.alerts.work import AlertWork

__all__ = ["SIGNATURE_HEADER", "AlertWork", "RuleDefinition", "dashboard_link", "deliver_due",
           "evaluate_campaigns", "evaluate_rule", "rule_definition", "rule_json",
           "rule_windows", "signature", "webhook_origin"]
