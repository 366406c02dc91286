"""Cross-origin access (http/cors.py): a browser client on another origin may read the answers
of the client routes — a campaign's config and reports, errors included — and nothing else;
credentials are never allowed. On the collector and on the shuffler. The real browser's side
is tests/browser/test_cross_origin.py."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from chorus_collector.app import create_app
from chorus_collector.settings import SettingsError
from chorus_collector.shuffler.app import create_shuffler_app
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, NOW, FakeClock

APP_ORIGIN = "https://app.example.com"
PREFLIGHT = {"Origin": APP_ORIGIN, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "content-type"}


def _report(config: dict[str, Any]) -> dict[str, Any]:
    precision = config["time_precision"]
    return {"report_id": secrets.token_hex(16), "digest": config["digest"],
            "time": int(NOW) // precision * precision, "payload": 0}


def _opened(reply: TestResponse, origin: str = "*") -> None:
    assert reply.headers.get("Access-Control-Allow-Origin") == origin, reply.headers
    assert "Retry-After" in reply.headers["Access-Control-Expose-Headers"]
    assert "Access-Control-Allow-Credentials" not in reply.headers


def _closed(reply: TestResponse) -> None:
    assert not [h for h, _ in reply.headers.items() if h.lower().startswith("access-control-")], \
        reply.headers


@pytest.fixture
def origins() -> str:
    return "*"


@pytest.fixture
def web(make_app: Callable[..., Flask], origins: str) -> FlaskClient:
    return make_app(CORS_ORIGINS=origins).test_client()


@pytest.fixture
def config(web: FlaskClient) -> dict[str, Any]:
    from helpers.support import campaign_spec

    reply = web.post("/v1/campaigns", json=campaign_spec("survey"), headers=ADMIN_HEADERS)
    assert reply.status_code == 201
    body: dict[str, Any] = reply.get_json()
    return body


@pytest.mark.parametrize("path", ["/v1/reports", "/v1/campaigns/survey/reports",
                                  "/v1/campaigns/survey"])
def test_a_preflight_on_a_client_route_is_answered(web: FlaskClient, config: dict[str, Any],
                                                   path: str) -> None:
    reply = web.options(path, headers=PREFLIGHT)
    assert reply.status_code == 200
    _opened(reply)
    assert "Content-Type" in reply.headers["Access-Control-Allow-Headers"]
    methods = reply.headers["Access-Control-Allow-Methods"]
    assert ("POST" if path.endswith("reports") else "GET") in methods
    assert int(reply.headers["Access-Control-Max-Age"]) > 0


def test_answers_and_refusals_of_the_client_routes_are_readable(
        web: FlaskClient, config: dict[str, Any]) -> None:
    origin = {"Origin": APP_ORIGIN}
    fetched = web.get("/v1/campaigns/survey", headers=origin)
    assert fetched.status_code == 200 and fetched.get_json()["digest"] == config["digest"]
    _opened(fetched)
    report = _report(config)
    sent = web.post("/v1/reports", json=report, headers=origin)
    assert sent.status_code == 201, sent.get_json()
    _opened(sent)
    _opened(web.post("/v1/reports", json=report, headers=origin))  # the duplicate's answer
    # Refusals a client acts on: a conflict, malformed JSON, an unknown campaign.
    conflict = web.post("/v1/reports", json={**report, "payload": 1}, headers=origin)
    assert conflict.status_code == 409
    _opened(conflict)
    malformed = web.post("/v1/reports", data=b"{", content_type="application/json",
                         headers=origin)
    assert malformed.status_code == 400
    _opened(malformed)
    unknown = web.get("/v1/campaigns/nobody", headers=origin)
    assert unknown.status_code == 404
    _opened(unknown)


@pytest.mark.parametrize(("method", "path", "headers"), [
    ("GET", "/v1/campaigns", ADMIN_HEADERS),
    ("POST", "/v1/campaigns", ADMIN_HEADERS),
    ("GET", "/v1/campaigns/survey/estimates", ANALYST_HEADERS),
    ("GET", "/v1/campaigns/survey/series", ANALYST_HEADERS),
    ("POST", "/v1/campaigns/survey/retire", ADMIN_HEADERS),
    ("GET", "/v1/annotations", ANALYST_HEADERS),
    ("GET", "/healthz", {}),
    ("GET", "/metrics", {}),
    ("GET", "/openapi.json", {}),
    ("GET", "/dashboard/", {}),
])
def test_no_other_route_is_opened_to_another_origin(web: FlaskClient, config: dict[str, Any],
                                                    method: str, path: str,
                                                    headers: dict[str, str]) -> None:
    # Not the answer, nor a preflight: a page elsewhere can never read estimates through a
    # browser that holds an analyst's session or token.
    _closed(web.open(path, method=method, headers={**headers, "Origin": APP_ORIGIN}))
    _closed(web.options(path, headers={**PREFLIGHT, "Access-Control-Request-Method": method}))


@pytest.mark.parametrize("origins", [f"{APP_ORIGIN}, http://127.0.0.1:5173/"])
def test_a_listed_origin_is_echoed_and_any_other_is_not(web: FlaskClient,
                                                        config: dict[str, Any]) -> None:
    listed = web.get("/v1/campaigns/survey", headers={"Origin": APP_ORIGIN})
    _opened(listed, APP_ORIGIN)
    assert "Origin" in listed.headers["Vary"]  # a cache keeps one origin's answer to it
    _opened(web.get("/v1/campaigns/survey", headers={"Origin": "http://127.0.0.1:5173"}),
            "http://127.0.0.1:5173")
    other = web.get("/v1/campaigns/survey", headers={"Origin": "https://evil.example"})
    assert other.status_code == 200  # served, but the browser keeps it from the page
    _closed(other)
    assert "Origin" in other.headers["Vary"]


@pytest.mark.parametrize("origins", [""])
def test_an_empty_setting_opens_nothing(web: FlaskClient, config: dict[str, Any]) -> None:
    _closed(web.get("/v1/campaigns/survey", headers={"Origin": APP_ORIGIN}))
    _closed(web.options("/v1/reports", headers=PREFLIGHT))


@pytest.mark.parametrize("origins", ["app.example.com", "https://app.example.com/path",
                                     "null"])
def test_a_setting_that_is_not_an_origin_is_refused_at_start(tmp_path: Path, clock: FakeClock,
                                                            origins: str) -> None:
    with pytest.raises(SettingsError, match="CORS_ORIGINS"):
        create_app({"DATABASE": str(tmp_path / "c.db"), "ADMIN_TOKEN": ADMIN,
                    "ANALYST_TOKEN": ANALYST, "CORS_ORIGINS": origins}, clock=clock)


def test_the_shuffler_opens_its_client_routes_alone(tmp_path: Path) -> None:
    shuffler = create_shuffler_app({
        "DATABASE": str(tmp_path / "pool.db"), "SHUFFLER_KEY": "k" * 32, "ADMIN_TOKEN": ADMIN,
        "COLLECTOR_URL": "http://127.0.0.1:9", "MIN_BATCH": 5, "MAX_BATCH": 10,
        "FORWARD_INTERVAL": 0}).test_client()
    report = {"report_id": secrets.token_hex(16), "digest": "d" * 64, "time": 3600,
              "payload": 0}
    pooled = shuffler.post("/v1/reports", json=report, headers={"Origin": APP_ORIGIN})
    assert pooled.status_code < 300, pooled.get_json()
    _opened(pooled)
    _opened(shuffler.options("/v1/reports", headers=PREFLIGHT))
    _closed(shuffler.post("/v1/flush", headers={**ADMIN_HEADERS, "Origin": APP_ORIGIN}))
