"""The OpenAPI description served at /openapi.json stays true: every route is described and
every described path is a route, and schemathesis's generated requests to every operation get
answers that match it (no 5xx, every status documented, every refusal problem+json)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, settings
from schemathesis import checks as st_checks

from chorus_collector.http.openapi import openapi_document
from helpers.support import ADMIN, ADMIN_HEADERS, campaign_spec, make_report

EXAMPLE_CAMPAIGN = "browsers"


def _routes(app: Flask) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("dashboard."):
            continue  # the dashboard's HTML pages are for browsers, not part of the API
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        routes |= {(path, method.lower()) for method in rule.methods or ()
                   if method not in ("HEAD", "OPTIONS")}
    return routes


def test_every_route_is_described_and_every_description_is_a_route(app: Flask) -> None:
    described = {(path, method) for path, operations in openapi_document()["paths"].items()
                 for method in operations}
    assert described == _routes(app)


#: Generated clients name their functions after these: a rename breaks every caller, so they
#: are pinned here and change only on purpose.
OPERATION_IDS = {
    ("/healthz", "get"): "getHealth",
    ("/metrics", "get"): "getMetrics",
    ("/openapi.json", "get"): "getOpenApi",
    ("/v1/campaigns", "get"): "listCampaigns",
    ("/v1/campaigns", "post"): "createCampaign",
    ("/v1/campaigns/{name}", "get"): "getCampaign",
    ("/v1/campaigns/{name}/retire", "post"): "retireCampaign",
    ("/v1/campaigns/{name}/reports", "post"): "submitCampaignReports",
    ("/v1/reports", "post"): "submitReports",
    ("/v1/campaigns/{name}/estimates", "get"): "getEstimates",
    ("/v1/campaigns/{name}/estimates", "post"): "queryEstimates",
    ("/v1/campaigns/{name}/series", "get"): "getSeries",
    ("/v1/campaigns/{name}/series", "post"): "querySeries",
    ("/v1/campaigns/{name}/compare", "get"): "getComparison",
    ("/v1/campaigns/{name}/compare", "post"): "queryComparison",
    ("/v1/design", "post"): "designCampaign",
    ("/v1/annotations", "get"): "listAnnotations",
    ("/v1/annotations", "post"): "createAnnotation",
    ("/v1/annotations/{id}", "delete"): "deleteAnnotation",
    ("/v1/alerts", "get"): "listAlerts",
    ("/v1/alerts", "post"): "createAlert",
    ("/v1/alerts/{name}", "get"): "getAlert",
    ("/v1/alerts/{name}", "delete"): "deleteAlert",
    ("/v1/alerts/{name}/firings", "get"): "listAlertFirings",
    ("/v1/campaigns/{name}/lists", "get"): "listSavedLists",
    ("/v1/campaigns/{name}/lists", "post"): "createSavedList",
    ("/v1/campaigns/{name}/lists/{id}", "delete"): "deleteSavedList",
    ("/v1/campaigns/{name}/views", "get"): "listSavedViews",
    ("/v1/campaigns/{name}/views/{id}", "delete"): "deleteSavedView",
    ("/v1/boards", "get"): "listBoards",
    ("/v1/boards", "post"): "createBoard",
    ("/v1/boards/{id}", "get"): "getBoard",
    ("/v1/boards/{id}", "delete"): "deleteBoard",
    ("/v1/boards/{id}/panels", "post"): "addBoardPanel",
    ("/v1/boards/{id}/panels/{panel}", "delete"): "removeBoardPanel",
}


def test_every_operation_has_a_unique_operation_id_and_one_declared_tag() -> None:
    document = openapi_document()
    declared = [tag["name"] for tag in document["tags"]]
    assert len(set(declared)) == len(declared)
    assert all(tag["description"] for tag in document["tags"])
    operations = {(path, method): operation
                  for path, item in document["paths"].items()
                  for method, operation in item.items()}
    ids = [operation["operationId"] for operation in operations.values()]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", name) for name in ids), ids
    assert {key: operation["operationId"] for key, operation in operations.items()} == \
        OPERATION_IDS
    used = set()
    for key, operation in operations.items():
        assert len(operation["tags"]) == 1 and operation["tags"][0] in declared, key
        used.add(operation["tags"][0])
    assert used == set(declared)  # no tag declared for nothing
    # Relative: OpenAPI 3.1 resolves it against the document's own address.
    assert document["servers"][0]["url"] == "/"


def test_the_served_document_is_the_description(app: Flask) -> None:
    reply = app.test_client().get("/openapi.json")
    assert reply.status_code == 200
    assert reply.get_json() == openapi_document()


def test_every_problem_kind_has_its_status_documented_somewhere() -> None:
    from chorus_collector.problems import KINDS

    documented = {int(status) for operations in openapi_document()["paths"].values()
                  for operation in operations.values() for status in operation["responses"]}
    served = {kind.status for kind in KINDS.values() if kind.status < 500}
    # 5xx answers are the collector failing (or the proxy's), never a described outcome,
    # except a busy database or query gate (503).
    assert served - documented == set()


class _CurrentApp:
    """A WSGI app that forwards to the app of the test being run: the schema is loaded once,
    when the module is, and each test's app is made by the fixtures."""

    app: Flask | None = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        assert self.app is not None, "the api fixture sets the app under test"
        return self.app(environ, start_response)


CURRENT = _CurrentApp()
schema = schemathesis.openapi.from_dict(openapi_document())
schema.app = CURRENT


@pytest.fixture
def api(make_app: Callable[..., Flask]) -> Iterator[Flask]:
    """The app with one campaign holding reports (so estimates can answer)."""
    app = make_app()
    http = app.test_client()
    reply = http.post("/v1/campaigns", headers=ADMIN_HEADERS,
                      json=campaign_spec(EXAMPLE_CAMPAIGN))
    assert reply.status_code == 201
    config = reply.get_json()
    rng = random.Random(5)
    reports = [make_report(config, rng.choice("abcd"), rng) for _ in range(30)]
    assert http.post(f"/v1/campaigns/{EXAMPLE_CAMPAIGN}/reports",
                     json={"reports": reports}).status_code == 200
    CURRENT.app = app
    yield app
    CURRENT.app = None


def problem_documents_only(ctx: Any, response: Any, case: Any) -> bool:
    """Every refusal is an RFC 9457 problem document."""
    if response.status_code >= 400:
        headers = {key.lower(): value for key, value in response.headers.items()}
        content_type = headers.get("content-type", [""])
        content_type = content_type[0] if isinstance(content_type, list) else content_type
        assert content_type.startswith("application/problem+json"), (
            f"{response.status_code} answered as {content_type!r}")
        body = response.json()
        assert body["status"] == response.status_code
        assert body["type"].startswith("https://chorus.dev/problems/")
    return True


CHECKS = [st_checks.not_a_server_error, st_checks.status_code_conformance,
          st_checks.content_type_conformance, st_checks.response_schema_conformance,
          problem_documents_only]


@schema.parametrize()
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_generated_requests_get_described_answers(api: Flask, case: Any) -> None:
    # Tokens that grant every role the route needs: what is checked is the answer's shape,
    # and refusals for want of a token are tested on their own elsewhere.
    case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN}"}, checks=CHECKS)

