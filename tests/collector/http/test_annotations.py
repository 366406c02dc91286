"""Annotations (issue 35 #6): marks on the time axis, one campaign's or every campaign's;
the admin writes them, analysts read them, the series draws them. On both backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from test_api import assert_problem

from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, NOW

HOUR = 3600


def _mark(http: FlaskClient, **body: Any) -> Any:
    return http.post("/v1/annotations", json=body, headers=ADMIN_HEADERS)


def test_marks_are_written_by_the_admin_and_read_per_campaign(
        http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    create("browser")
    create("theme")
    t = int(NOW)
    own = _mark(http, time=t - 2 * HOUR, text="v2.3 shipped", campaign="browser")
    assert own.status_code == 201
    assert own.get_json() == {"id": own.get_json()["id"], "time": t - 2 * HOUR,
                              "text": "v2.3 shipped", "campaign": "browser",
                              "created_at": NOW}
    every = _mark(http, time=t - HOUR, text="  outage  ").get_json()
    assert every["campaign"] is None and every["text"] == "outage"
    _mark(http, time=t - 3 * HOUR, text="theme only", campaign="theme")

    def listed(**query: Any) -> list[str]:
        reply = http.get("/v1/annotations", query_string=query, headers=ANALYST_HEADERS)
        assert reply.status_code == 200, reply.get_json()
        return [m["text"] for m in reply.get_json()["annotations"]]

    assert listed(campaign="browser") == ["v2.3 shipped", "outage"]  # in time order
    assert listed(campaign="theme") == ["theme only", "outage"]
    assert listed() == ["theme only", "v2.3 shipped", "outage"]
    assert listed(start=t - 2 * HOUR, end=t - HOUR) == ["v2.3 shipped"]  # end excluded
    gone = http.delete(f"/v1/annotations/{own.get_json()['id']}", headers=ADMIN_HEADERS)
    assert gone.status_code == 204
    assert listed(campaign="browser") == ["outage"]
    assert_problem(http.delete(f"/v1/annotations/{own.get_json()['id']}",
                               headers=ADMIN_HEADERS), 404, "not-found")


@pytest.mark.parametrize(("body", "detail"), [
    ({"time": 1.5, "text": "x"}, "time is Unix seconds"),
    ({"time": -1, "text": "x"}, "time is Unix seconds"),
    ({"time": True, "text": "x"}, "time is Unix seconds"),
    ({"time": 0, "text": ""}, "text is one line of 1 to 200 characters"),
    ({"time": 0, "text": "a\nb"}, "text is one line"),
    ({"time": 0, "text": "x" * 201}, "text is one line"),
    ({"time": 0}, 'send {"time"'),
    ({"time": 0, "text": "x", "colour": "red"}, 'send {"time"'),
    ({"time": 0, "text": "x", "campaign": 3}, "campaign is a campaign's name"),
])
def test_a_bad_mark_is_refused_and_nothing_is_written(http: FlaskClient, body: dict[str, Any],
                                                     detail: str) -> None:
    assert detail in assert_problem(_mark(http, **body), 400, "invalid-request")["detail"]
    listed = http.get("/v1/annotations", headers=ANALYST_HEADERS).get_json()
    assert listed == {"annotations": []}


def test_who_may_mark_and_read(http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    assert_problem(_mark(http, time=0, text="x", campaign="nope"), 404, "unknown-campaign")
    assert_problem(http.post("/v1/annotations", json={"time": 0, "text": "x"},
                             headers=ANALYST_HEADERS), 403, "forbidden")
    assert_problem(http.get("/v1/annotations"), 401, "unauthorized")
    assert_problem(http.delete("/v1/annotations/1", headers=ANALYST_HEADERS), 403, "forbidden")


def test_an_id_past_64_bits_is_not_found(http: FlaskClient) -> None:
    assert_problem(http.delete(f"/v1/annotations/{1 << 64}", headers=ADMIN_HEADERS), 404,
                   "not-found")
