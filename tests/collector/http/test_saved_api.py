"""The saved lists, views and boards over the API (http/saved.py): what the dashboard shows
is what the API saved, and bad input is a 4xx problem; on the backend the run picks."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from helpers.support import ANALYST, ANALYST_HEADERS


def _problem(reply: Any, status: int) -> None:
    assert reply.status_code == status, reply.get_data(as_text=True)
    assert reply.mimetype == "application/problem+json"


def test_lists_saved_by_the_api_open_the_dashboard_page(
        http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    create("pages", mechanism="rappor")
    create("other", mechanism="rappor")
    url = "/v1/campaigns/pages/lists"
    _problem(http.post(url, json={"name": "a", "candidates": ["x"]}), 401)
    made = http.post(url, json={"name": "front", "candidates": [" home", "news", "home", ""]},
                     headers=ANALYST_HEADERS)
    assert made.status_code == 201
    body = made.get_json()
    assert body["candidates"] == ["home", "news"] and body["campaign"] == "pages"
    assert body["link"] == f"/campaigns/pages?list={body['id']}"
    again = http.post(url, json={"name": "front", "candidates": ["mail"]},
                      headers=ANALYST_HEADERS).get_json()
    assert again["id"] == body["id"]  # the same name: the same list (and links), new strings
    assert http.get(url, headers=ANALYST_HEADERS).get_json()["lists"] == [again]
    for bad in ({"name": "x", "candidates": ["a\nb"]}, {"name": "x", "candidates": ["a\x00"]},
                {"name": "x\x00", "candidates": ["a"]}, {"name": "", "candidates": ["a"]},
                {"name": "x", "candidates": []}, {"name": "x", "candidates": [1]},
                {"name": "x"}, ["x"]):
        _problem(http.post(url, json=bad, headers=ANALYST_HEADERS), 400)
    _problem(http.delete(f"/v1/campaigns/other/lists/{body['id']}", headers=ANALYST_HEADERS),
             404)
    http.post("/login", data={"token": ANALYST, "csrf_token": _token(http)})
    page = http.get(again["link"]).get_data(as_text=True)
    assert 'data-label="mail"' in page and 'data-label="home"' not in page
    assert http.delete(f"{url}/{body['id']}", headers=ANALYST_HEADERS).status_code == 204
    assert http.get(url, headers=ANALYST_HEADERS).get_json()["lists"] == []
    _problem(http.delete(f"{url}/{2 ** 70}", headers=ANALYST_HEADERS), 404)


def _token(http: FlaskClient, path: str = "/login") -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', http.get(path).get_data(as_text=True))
    assert match is not None
    return match.group(1)


def test_boards_and_views_over_the_api(http: FlaskClient,
                                       create: Callable[..., dict[str, Any]]) -> None:
    create("survey")
    http.post("/login", data={"token": ANALYST, "csrf_token": _token(http)})
    saved = http.post("/campaigns/survey/views", data={
        "csrf_token": _token(http, "/campaigns/survey"), "query": "last=7d&step=day",
        "view_name": "week"})
    assert saved.status_code == 302
    views = http.get("/v1/campaigns/survey/views", headers=ANALYST_HEADERS).get_json()["views"]
    assert [(v["name"], v["query"], v["link"]) for v in views] == [
        ("week", "last=7d&step=day", "/campaigns/survey?last=7d&step=day")]
    board = http.post("/v1/boards", json={"name": "Weekly"}, headers=ANALYST_HEADERS)
    assert board.status_code == 201
    board_id = board.get_json()["id"]
    assert http.post("/v1/boards", json={"name": "Weekly"},
                     headers=ANALYST_HEADERS).get_json()["id"] == board_id
    panels = f"/v1/boards/{board_id}/panels"
    added = http.post(panels, json={"campaign": "survey", "section": "series",
                                    "view": views[0]["id"]}, headers=ANALYST_HEADERS)
    assert added.status_code == 201
    http.post(panels, json={"campaign": "survey", "section": "estimates"},
              headers=ANALYST_HEADERS)
    got = http.get(f"/v1/boards/{board_id}", headers=ANALYST_HEADERS).get_json()
    assert [(p["campaign"], p["section"], p["view"]) for p in got["panels"]] == [
        ("survey", "series", views[0]["id"]), ("survey", "estimates", None)]
    page = http.get(f"/boards/{board_id}").get_data(as_text=True)
    assert page.count('<section class="panel"') == 2 and "survey · series · week" in page
    for bad in ({"campaign": "survey", "section": "comparison"},
                {"campaign": "survey", "section": "series", "view": 10 ** 30},
                {"campaign": "survey"}):
        _problem(http.post(panels, json=bad, headers=ANALYST_HEADERS), 400)
    _problem(http.post(panels, json={"campaign": "nothing", "section": "series"},
                       headers=ANALYST_HEADERS), 404)
    # Removing the view removes its panel.
    assert http.delete(f"/v1/campaigns/survey/views/{views[0]['id']}",
                       headers=ANALYST_HEADERS).status_code == 204
    got = http.get(f"/v1/boards/{board_id}", headers=ANALYST_HEADERS).get_json()
    assert [p["section"] for p in got["panels"]] == ["estimates"]
    assert http.delete(f"{panels}/{got['panels'][0]['id']}",
                       headers=ANALYST_HEADERS).status_code == 204
    assert http.get("/v1/boards", headers=ANALYST_HEADERS).get_json()["boards"] == [
        {"id": board_id, "name": "Weekly", "created_at": got["created_at"]}]
    assert http.delete(f"/v1/boards/{board_id}", headers=ANALYST_HEADERS).status_code == 204
    _problem(http.get(f"/v1/boards/{board_id}", headers=ANALYST_HEADERS), 404)
