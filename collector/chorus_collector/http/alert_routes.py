"""The alert rules' routes (``/v1/alerts``): admins write them, analysts read them.

=================================================  =========  ==========================
``GET    /v1/alerts``                                analyst    list rules (``campaign=``)
``POST   /v1/alerts``                                admin      create a rule
``GET    /v1/alerts/<name>``                         analyst    a rule, with its values
                                                                significant now
``DELETE /v1/alerts/<name>``                         admin      delete a rule (and its
                                                                undelivered notifications)
``GET    /v1/alerts/<name>/firings``                 analyst    its recent notifications
=================================================  =========  ==========================
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from chorus_collector.alerts import rule_definition, rule_json
from chorus_collector.http.api import json_body, require, storage
from chorus_collector.problems import Problem
from chorus_collector.storage import AlertFiring, StoredAlertRule

__all__ = ["FIRINGS_SHOWN", "alert_api", "firing_json"]

alert_api = Blueprint("chorus_alerts", __name__)
FIRINGS_SHOWN = 50  # the default of ``limit``; at most 1,000
_LIMIT = re.compile(r"[0-9]{1,4}")


def _rule(name: str) -> StoredAlertRule:
    rule = storage().get_alert_rule(name)
    if rule is None:
        raise Problem("unknown-alert", f"no alert rule is named {name!r}")
    return rule


def _shown(rule: StoredAlertRule, with_state: bool = False) -> dict[str, Any]:
    db = storage()
    campaign = db.get_campaign_by_id(rule.campaign_id).campaign.name
    return rule_json(rule, campaign, db.alert_state(rule.id) if with_state else None)


def firing_json(firing: AlertFiring) -> dict[str, Any]:
    """A notification as the API shows it: its delivery and the body sent."""
    return {"event": firing.event, "idempotency_key": firing.key,
            "created_at": firing.created_at, "status": firing.status,
            "attempts": firing.attempts,
            "next_attempt_at": firing.next_attempt_at if firing.status == "pending" else None,
            "delivered_at": firing.delivered_at, "last_error": firing.last_error,
            "payload": json.loads(firing.payload)}


@alert_api.get("/v1/alerts")
def list_alerts() -> Response:
    require("analyst")
    db = storage()
    campaign = request.args.get("campaign")
    if campaign is None:
        rules = db.alert_rules()
    else:
        stored = db.get_campaign(campaign)
        if stored is None:
            raise Problem("unknown-campaign", f"no campaign is named {campaign!r}")
        rules = db.alert_rules([stored.id])
    return jsonify(alerts=[_shown(rule) for rule in rules])


@alert_api.post("/v1/alerts")
def create_alert() -> tuple[Response, int]:
    require("admin")
    db = storage()
    checked = rule_definition(json_body(), db.get_campaign)
    try:
        rule = db.insert_alert_rule(checked.name, checked.campaign.id, checked.definition,
                                         checked.webhook, checked.secret,
                                         current_app.extensions["chorus.clock"]())
    except FileExistsError:
        raise Problem("alert-exists", f"an alert rule is already named {checked.name!r}; "
                      "delete it first, or choose another name") from None
    return jsonify(_shown(rule, with_state=True)), 201


@alert_api.get("/v1/alerts/<name>")
def get_alert(name: str) -> Response:
    require("analyst")
    return jsonify(_shown(_rule(name), with_state=True))


@alert_api.delete("/v1/alerts/<name>")
def delete_alert(name: str) -> Response:
    require("admin")
    storage().delete_alert_rule(_rule(name).id)
    return Response(status=204)


@alert_api.get("/v1/alerts/<name>/firings")
def alert_firings(name: str) -> Response:
    require("analyst")
    rule = _rule(name)
    text = request.args.get("limit", str(FIRINGS_SHOWN))
    if not _LIMIT.fullmatch(text) or not 1 <= int(text) <= 1_000:
        raise Problem("invalid-query", "limit must be a whole number from 1 to 1000")
    return jsonify(firings=[firing_json(f) for f in storage().alert_firings(rule.id,
                                                                             int(text))])
