"""The alert rules' routes: admins write, analysts read; every refusal is a 4xx problem
document; the webhook's path and query and the secret are never shown; a deleted rule takes
its state and its notifications with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from chorus_collector.alerts import dashboard_link
from chorus_collector.alerts.rules import parse_duration
from chorus_collector.storage import StoredCampaign
from chorus_shared.campaign import campaign_from_spec
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, campaign_spec

HOOK = "https://hooks.example.com/services/T000/B000/XXXX?token=abc"
RULE = {"name": "signups", "campaign": "survey", "window": "1d", "webhook": HOOK}


@pytest.fixture
def survey(create: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return create("survey")


def _post(http: FlaskClient, **changes: Any) -> Any:
    body = {**RULE, **changes}
    return http.post("/v1/alerts", headers=ADMIN_HEADERS,
                     json={k: v for k, v in body.items() if v is not None})


@pytest.mark.parametrize(("changes", "says"), [
    ({"name": "Not A Name"}, "name must be"),
    ({"window": None}, "window is required"),
    ({"window": "90m"}, "whole number of the campaign's time buckets"),
    ({"window": 0}, "whole number"),
    ({"window": "soon"}, "is not a duration"),
    ({"window": "400d"}, "at most 366 days"),
    ({"webhook": "ftp://hooks.example.com/x"}, "http:// or https://"),
    ({"webhook": "https://user:pw@hooks.example.com/x"}, "user name or password"),
    ({"webhook": "https://hooks.example.com/x#frag"}, "fragment"),
    ({"webhook": "https://hooks.example.com:99999/x"}, "not a valid URL"),
    ({"webhook": "not a url"}, "webhook must be"),
    ({"webhook": None}, "webhook must be"),
    ({"values": ["a", "zzz"]}, "values must be distinct values"),
    ({"values": ["a", "a"]}, "values must be distinct values"),
    ({"values": "a"}, "values must be a list"),
    ({"correction": "holm"}, "correction must be one of"),
    ({"alpha": 1.5}, "alpha must be between 0 and 1"),
    ({"alpha": True}, "alpha must be a number"),
    ({"min_change": -0.1}, "min_change must be at least 0"),
    ({"resolved": "yes"}, "resolved must be true or false"),
    ({"secret": "short"}, "secret must be 16 to 256"),
    ({"colour": "red"}, "unknown fields ['colour']"),
])
def test_a_bad_rule_is_refused_with_a_problem_that_says_why(
        http: FlaskClient, survey: dict[str, Any], changes: dict[str, Any], says: str) -> None:
    reply = _post(http, **changes)
    assert reply.status_code == 400
    assert reply.mimetype == "application/problem+json"
    problem = reply.get_json()
    assert problem["type"].endswith("/invalid-alert") and says in problem["detail"]


def test_other_refusals_are_problems_too(http: FlaskClient, survey: dict[str, Any]) -> None:
    reply = _post(http, campaign="nothing")
    assert (reply.status_code, reply.get_json()["type"].rsplit("/", 1)[1]) == \
        (404, "unknown-campaign")
    assert http.post("/v1/alerts", headers=ADMIN_HEADERS, data="[1]",
                     content_type="application/json").status_code == 400
    assert _post(http).status_code == 201
    reply = _post(http)
    assert (reply.status_code, reply.get_json()["type"].rsplit("/", 1)[1]) == \
        (409, "alert-exists")
    for path in ("/v1/alerts/nothing", "/v1/alerts/nothing/firings"):
        reply = http.get(path, headers=ANALYST_HEADERS)
        assert reply.status_code == 404 and reply.mimetype == "application/problem+json"
    reply = http.get("/v1/alerts/signups/firings?limit=0", headers=ANALYST_HEADERS)
    assert reply.status_code == 400 and reply.get_json()["type"].endswith("/invalid-query")
    assert http.get("/v1/alerts?campaign=nothing",
                    headers=ANALYST_HEADERS).status_code == 404
    # Open strings: the values to watch are the candidates, and there must be some.
    assert http.post("/v1/campaigns", headers=ADMIN_HEADERS,
                     json=campaign_spec("words", mechanism="rappor")).status_code == 201
    reply = _post(http, name="words-daily", campaign="words")
    assert reply.status_code == 400 and "candidate" in reply.get_json()["detail"]
    assert _post(http, name="words-daily", campaign="words",
                 values=["hello", "world"]).status_code == 201


def test_admins_write_analysts_read_and_nobody_sees_the_url_or_the_secret(
        http: FlaskClient, survey: dict[str, Any]) -> None:
    secret = "s3cret-s3cret-s3cret"
    assert http.post("/v1/alerts", headers=ANALYST_HEADERS, json=RULE).status_code == 403
    assert http.post("/v1/alerts", json=RULE).status_code == 401
    created = _post(http, secret=secret, values=["a", "c"], correction="bonferroni",
                    alpha=0.01, min_change=0.05, resolved=True)
    assert created.status_code == 201
    rule = created.get_json()
    assert rule["webhook"] == "https://hooks.example.com/…" and rule["signed"] is True
    assert (rule["window"], rule["values"], rule["correction"], rule["alpha"],
            rule["min_change"], rule["resolved"]) == (86400, ["a", "c"], "bonferroni", 0.01,
                                                      0.05, True)
    assert rule["significant"] == [] and rule["last_end"] is None
    listed = http.get("/v1/alerts", headers=ANALYST_HEADERS)
    one = http.get("/v1/alerts/signups", headers=ANALYST_HEADERS)
    by_campaign = http.get("/v1/alerts?campaign=survey", headers=ANALYST_HEADERS)
    for reply in (created, listed, one, by_campaign):
        text = reply.get_data(as_text=True)
        assert "services" not in text and "token" not in text and secret not in text
    assert [r["name"] for r in listed.get_json()["alerts"]] == ["signups"]
    assert by_campaign.get_json() == listed.get_json()
    assert http.get("/v1/alerts/signups/firings",
                    headers=ANALYST_HEADERS).get_json() == {"firings": []}
    assert http.delete("/v1/alerts/signups", headers=ANALYST_HEADERS).status_code == 403
    assert http.delete("/v1/alerts/signups", headers=ADMIN_HEADERS).status_code == 204
    assert http.get("/v1/alerts/signups", headers=ANALYST_HEADERS).status_code == 404
    assert http.get("/v1/alerts", headers=ANALYST_HEADERS).get_json() == {"alerts": []}
    assert _post(http).status_code == 201  # the name is free again


def test_durations_and_the_dashboard_link() -> None:
    assert [parse_duration(v) for v in (90, "30m", "6h", "1d", "2w")] == \
        [90, 1800, 21600, 86400, 1209600]
    stored = StoredCampaign(1, campaign_from_spec(campaign_spec(
        "open.strings", mechanism="rappor")))
    link = dashboard_link("https://chorus.example.com/", stored, (0, 3600), (3600, 7200),
                          "bonferroni", ["x y", "z"])
    assert link == ("https://chorus.example.com/campaigns/open.strings?baseline_start=0&"
                    "baseline_end=3600&current_start=3600&current_end=7200&"
                    "correction=bonferroni&candidates=x+y%0Az#comparison")
    assert dashboard_link(None, stored, (0, 3600), (3600, 7200), "bonferroni",
                          []).startswith("/campaigns/open.strings?")
