"""Time on a campaign page (issue 35 #6): relative ranges that keep moving, a page that reloads
itself, dates typed and shown in UTC (never the browser's locale), and a bound moved to its
bucket's edge said rather than done silently."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask.testing import FlaskClient
from test_dashboard import seed, sign_in

from helpers.support import ANALYST_HEADERS, NOW, FakeClock

HOUR = 3600


@pytest.fixture
def signed_in(http: FlaskClient) -> FlaskClient:
    assert sign_in(http).status_code == 302
    return http


def _input(page: str, name: str) -> str:
    match = re.search(rf'<input type="text" name="{name}" value="([^"]*)"', page)
    assert match is not None, name
    return match.group(1)


def test_the_last_24_hours_is_the_apis_window_and_moves_with_the_clock(
        signed_in: FlaskClient, create: Any, clock: FakeClock) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[i % 4], buckets=30, per_bucket=40)
    page = signed_in.get("/campaigns/survey?last=24h").get_data(as_text=True)
    start, end = int(NOW) - 24 * HOUR, int(NOW) + HOUR  # through the bucket now running
    api = signed_in.get("/v1/campaigns/survey/estimates", headers=ANALYST_HEADERS,
                        query_string={"start": start, "end": end}).get_json()
    assert f'<span id="n">{api["n"]:,}</span>' in page and api["n"] == 25 * 40
    assert "2025-12-31 00:00 UTC to 2026-01-01 01:00 UTC" in page
    assert '<option value="24h" selected>the last 24 hours</option>' in page
    # No absolute bound in the form: submitted again (or reloaded) later, the range moves.
    assert _input(page, "start") == _input(page, "end") == _input(page, "current_start") == ""
    # The comparison: the range against the one before it.
    assert "Current 2025-12-31 00:00 UTC to 2026-01-01 01:00 UTC" in page
    assert "against baseline 2025-12-29 23:00 UTC to 2025-12-31 00:00 UTC" in page
    clock.now = NOW + 5 * HOUR
    later = signed_in.get("/campaigns/survey?last=24h").get_data(as_text=True)
    assert "2025-12-31 05:00 UTC to 2026-01-01 06:00 UTC" in later
    wrong = signed_in.get("/campaigns/survey?last=2w")
    assert wrong.status_code == 400 and "last must be one of 24h, 7d, 30d, 90d" in \
        wrong.get_data(as_text=True)


def test_the_page_reloads_itself_when_asked(signed_in: FlaskClient, create: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[i % 4], buckets=2)
    page = signed_in.get("/campaigns/survey?last=7d&refresh=300").get_data(as_text=True)
    assert '<meta http-equiv="refresh" content="300">' in page
    assert '<option value="300" selected>every 5 minutes</option>' in page
    plain = signed_in.get("/campaigns/survey").get_data(as_text=True)
    assert 'http-equiv="refresh"' not in plain
    wrong = signed_in.get("/campaigns/survey?refresh=61")
    assert wrong.status_code == 400 and "refresh must be one of 0, 60, 300, 900 seconds" in \
        wrong.get_data(as_text=True)
    # A page asked by POST (a candidate list) cannot ask again by reloading: no refresh.
    create("pages", mechanism="rappor")
    strings = signed_in.get("/campaigns/pages?refresh=60").get_data(as_text=True)
    assert 'http-equiv="refresh"' not in strings and 'name="refresh"' not in strings


def test_dates_are_typed_and_shown_in_utc_and_a_moved_bound_is_said(
        signed_in: FlaskClient, create: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[i % 4], buckets=4)
    page = signed_in.get("/campaigns/survey", query_string={
        "start": "2025-12-31 22:17", "end": "2026-01-01T00:30"}).get_data(as_text=True)
    assert 'type="datetime-local"' not in page  # the browser's locale never formats them
    assert _input(page, "start") == "2025-12-31 22:00"
    assert _input(page, "end") == "2026-01-01 01:00"
    assert ("Start 2025-12-31 22:17 UTC was moved down to 2025-12-31 22:00 UTC, the start of "
            "its time bucket (1 hour): estimates are kept per bucket.") in page
    assert ("End 2026-01-01 00:30 UTC was moved up to 2026-01-01 01:00 UTC, the end of its "
            "time bucket (1 hour)") in page
    aligned = signed_in.get("/campaigns/survey", query_string={
        "start": "2025-12-31 22:00"}).get_data(as_text=True)
    assert "was moved" not in aligned
    assert "2025-12-31 22:00 UTC to the last report" in aligned  # not "to the last UTC"
