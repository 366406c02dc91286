"""The campaign designer over HTTP: ``POST /v1/design`` answers what ``chorus design`` and the
dashboard's designer show, as JSON, for tools that plan campaigns (analyst token).

The body is the designer's request (``chorus_collector.design.request``: kind, domain, ε,
users, and optionally a plan over time and a distribution); with ``"simulate": MECHANISM``
(or ``"recommended"``) and a distribution, one simulated window comes with it, computed under
the query admission like any estimate.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from chorus_collector.design import designer
from chorus_collector.http.admission import admission
from chorus_collector.http.api import json_body, require
from chorus_collector.problems import Problem
from chorus_shared.errors import CampaignError

__all__ = ["SIMULATION_SEED", "design_routes"]

design_routes = Blueprint("chorus_design", __name__)
SIMULATION_SEED = 1  # as the dashboard's: the same question shows the same simulated run


@design_routes.post("/v1/design")
def design() -> Response:
    require("analyst")
    body = json_body()
    if not isinstance(body, dict):
        raise Problem("invalid-request", "send the designer's request as a JSON object")
    question: dict[str, Any] = dict(body)
    simulate = question.pop("simulate", None)
    if simulate is not None and not isinstance(simulate, str):
        raise Problem("invalid-request", 'simulate is a mechanism\'s name or "recommended"')
    try:
        plan = designer.design(question)
        answer = plan.to_json()
        if simulate is not None:
            if "distribution" not in question:
                raise Problem("invalid-request", "simulate needs a distribution to draw from")
            mechanism = answer["recommended"] if simulate == "recommended" else simulate
            answer["simulation"] = admission().run(lambda: designer.simulate_design(
                question, mechanism, seed=SIMULATION_SEED))
    except CampaignError as error:
        raise Problem("invalid-campaign", str(error)) from None
    return jsonify(answer)
