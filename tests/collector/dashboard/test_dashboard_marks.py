"""Marks on a campaign's series (issue 35 #6): drawn where they fall, escaped, listed under the
chart; the admin adds one from the page."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient
from test_dashboard import csrf_token, seed, sign_in

from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST_HEADERS, NOW

HOUR = 3600


def _mark(http: FlaskClient, **body: Any) -> Any:
    return http.post("/v1/annotations", json=body, headers=ADMIN_HEADERS)


def test_the_series_draws_its_marks_and_the_admin_adds_one_on_the_page(
        http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    config = create("browser")
    seed(http, config, lambda bucket, i: "abcd"[i % 4], buckets=4)
    _mark(http, time=int(NOW) - 2 * HOUR, text="v2.3 <shipped>", campaign="browser")
    _mark(http, time=int(NOW) - 30 * 86400, text="long ago")  # outside the series: not drawn
    assert sign_in(http, ADMIN).status_code == 302
    page = http.get("/campaigns/browser?step=bucket").get_data(as_text=True)
    drawn = re.findall(r'<g class="mark" data-time="(\d+)" data-text="([^"]*)">', page)
    assert drawn == [(str(int(NOW) - 2 * HOUR), "v2.3 &lt;shipped&gt;")]
    assert "<shipped>" not in page
    token = csrf_token(http, "/campaigns/browser")
    added = http.post("/campaigns/browser/marks", data={
        "csrf_token": token, "time": "2025-12-31 23:30", "text": "hotfix"})
    assert added.status_code == 302 and added.headers["Location"].endswith("#series")
    marks = http.get("/v1/annotations?campaign=browser", headers=ANALYST_HEADERS).get_json()
    assert [(m["time"], m["text"]) for m in marks["annotations"]] == [
        (int(NOW) - 30 * 86400, "long ago"), (int(NOW) - 2 * HOUR, "v2.3 <shipped>"),
        (int(NOW) - 1800, "hotfix")]
