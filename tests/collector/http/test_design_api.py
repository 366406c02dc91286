"""``POST /v1/design``: the campaign designer as JSON, the same figures ``chorus design`` and
the dashboard show; a simulated window on request; refusals as problem documents."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from test_api import assert_problem

from chorus_collector.design import designer
from helpers.support import ANALYST_HEADERS

QUESTION = {"kind": "categories", "categories": ["chrome", "safari", "other"], "epsilon": 1.0,
            "users": 20_000}


def test_the_answer_is_the_designers(http: FlaskClient) -> None:
    reply = http.post("/v1/design", json=QUESTION, headers=ANALYST_HEADERS)
    assert reply.status_code == 200
    assert reply.get_json() == designer.design(QUESTION).to_json()
    assert reply.get_json()["recommended"] in {row["mechanism"] for row in
                                               reply.get_json()["rows"]}
    assert "simulation" not in reply.get_json()


def test_a_simulated_window_on_request(http: FlaskClient) -> None:
    shares = {"chrome": 0.6, "safari": 0.3, "other": 0.1}
    reply = http.post("/v1/design", json={**QUESTION, "distribution": shares,
                                          "simulate": "recommended"}, headers=ANALYST_HEADERS)
    body = reply.get_json()
    assert reply.status_code == 200 and body["simulation"]["mechanism"] == body["recommended"]
    expected = designer.simulate_design({**QUESTION, "distribution": shares},
                                        body["recommended"], seed=1)
    assert body["simulation"] == expected  # seeded: the same question, the same run
    assert {row["label"] for row in body["simulation"]["estimates"]} == set(shares)


@pytest.mark.parametrize(("body", "status", "kind", "detail"), [
    ({**QUESTION, "epsilon": -1}, 400, "invalid-campaign", "epsilon"),
    ({**QUESTION, "kind": "colours"}, 400, "invalid-campaign", "kind"),
    ({**QUESTION, "simulate": "krr"}, 400, "invalid-request", "needs a distribution"),
    ({**QUESTION, "simulate": 3}, 400, "invalid-request", "simulate is a mechanism"),
    ([1, 2], 400, "invalid-request", "JSON object"),
])
def test_a_bad_question_is_a_problem(http: FlaskClient, body: Any, status: int, kind: str,
                                     detail: str) -> None:
    reply = http.post("/v1/design", json=body, headers=ANALYST_HEADERS)
    assert detail in assert_problem(reply, status, kind)["detail"]


def test_the_designer_needs_a_token(http: FlaskClient) -> None:
    assert_problem(http.post("/v1/design", json=QUESTION), 401, "unauthorized")


def test_the_simulation_does_not_depend_on_the_order_of_the_shares() -> None:
    ordered = {**QUESTION, "distribution": {"chrome": 0.6, "safari": 0.3, "other": 0.1}}
    shuffled = {**QUESTION, "distribution": {"other": 0.1, "chrome": 0.6, "safari": 0.3}}
    assert designer.simulate_design(ordered, "krr", seed=1) == \
        designer.simulate_design(shuffled, "krr", seed=1)
