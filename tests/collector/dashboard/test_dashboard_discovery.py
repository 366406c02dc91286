"""A discovery campaign's dashboard page over Flask's test client: without a candidate list it
shows what the walk found (bars and table with the API's numbers, detected flags, the walk in
words), over time and between two windows too; a list in the candidate box is re-estimated
(the second stage); downloads are the API's answers (the real-browser test is
tests/browser/test_discovery_page.py)."""

from __future__ import annotations

import html
import json
import random
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.estimators.discovery import WALKS
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import Storage
from helpers.discoveryseed import HOUR, SPEC, WORDS, seed_folded
from helpers.support import ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, NOW, make_report

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_BAR = re.compile(r'<g class="bar( flagged)?" data-label="([^"]*)" data-estimate="([^"]*)" '
                  r'data-ci-low="([^"]*)" data-ci-high="([^"]*)">')
_ROW = re.compile(r'<tr data-value="([^"]*)" data-detected="(true|false)"><th scope="row" '
                  r'class="value">([^<]*)</th>')
PAGE = f"/campaigns/{SPEC['name']}"
API = f"/v1/campaigns/{SPEC['name']}"


def _csrf(client: FlaskClient, path: str) -> str:
    match = _CSRF.search(client.get(path).get_data(as_text=True))
    assert match, f"{path} has no CSRF token"
    return match.group(1)


@pytest.fixture
def signed_in(app: Flask, http: FlaskClient) -> FlaskClient:
    reply = http.post("/v1/campaigns", json=SPEC, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    storage: Storage = app.extensions["chorus.storage"]
    stored = storage.get_campaign(SPEC["name"])
    assert stored is not None
    seed_folded(storage, stored)
    signed = http.post("/login", data={"token": ANALYST, "csrf_token": _csrf(http, "/login")})
    assert signed.status_code == 302
    return http


def _section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}"')[1].split("</section>")[0]


def _bars(section: str) -> dict[str, tuple[bool, float, float, float]]:
    return {html.unescape(label): (bool(flag), float(e), float(lo), float(hi))
            for flag, label, e, lo, hi in _BAR.findall(section)}


def _api(http: FlaskClient, path: str, **body: Any) -> dict[str, Any]:
    reply = http.post(path, json=body, headers=ANALYST_HEADERS) if body else \
        http.get(path, headers=ANALYST_HEADERS)
    assert reply.status_code == 200, reply.get_json()
    answer: dict[str, Any] = reply.get_json()
    return answer


def test_the_page_shows_what_the_walk_found(signed_in: FlaskClient) -> None:
    page = signed_in.get(PAGE).get_data(as_text=True)
    api = _api(signed_in, f"{API}/estimates")
    estimates = _section(page, "estimates")
    assert 'class="notice"' not in estimates  # no "paste candidates" prompt
    # Bars: the API's numbers; the accent colour exactly on the detected values.
    drawn = _bars(estimates)
    assert drawn == {row["value"]: (row["detected"], row["frequency"],
                                    row["frequency_ci_low"], row["frequency_ci_high"])
                     for row in api["rows"]}
    assert {value for value, (flag, *_) in drawn.items() if flag} == set(WORDS)
    # The table: every row in the API's order with its flag; an invisible character escaped.
    rows = [(html.unescape(value), flag, html.unescape(shown))
            for value, flag, shown in _ROW.findall(estimates)]
    assert [(value, flag) for value, flag, _ in rows] == [
        (row["value"], "true" if row["detected"] else "false") for row in api["rows"]]
    assert ("a\tb", "true", '"a\\tb"') in rows
    assert "Every value discovered" in estimates
    # The walk, in words, with the numbers of the API's record.
    walk = api["extra"]["discovery"]
    match = re.search(r'<p class="meta" id="discovery" data-stage="([^"]+)" '
                      r'data-values-tested="(\d+)">(.*?)</p>', estimates, re.S)
    assert match is not None
    assert match.group(1) == "discovery" and int(match.group(2)) == walk["values_tested"]
    said = " ".join(html.unescape(match.group(3)).split())
    assert said.startswith("Discovered by PEM's walk down the prefixes, without a candidate "
                           "list: ")
    for step in walk["steps"]:
        assert (f"{step['prefix_bits']} bits from {step['reports']:,} reports "
                f"({step['candidates']:,} candidates, {step['kept']} kept)") in said
    assert f"from the {walk['final_reports']:,} estimation-group reports" in said
    assert (f"family-wise error 0.05 over the {walk['values_tested']} values the final fit "
            "estimated (the walk's survivors)") in said
    # The candidate box says it is optional here.
    assert "Re-estimate a list (optional)" in page


def test_over_time_and_between_windows_track_the_values_found(signed_in: FlaskClient) -> None:
    page = signed_in.get(PAGE).get_data(as_text=True)
    series, comparison = _section(page, "series"), _section(page, "comparison")
    assert 'class="notice"' not in series and 'class="notice"' not in comparison
    found = [row["value"] for row in _api(signed_in, f"{API}/estimates")["rows"]]
    assert "One line per value the walk discovers over the whole window (8, from 60,000 " \
           "reports)" in series
    assert "The 8 values the walk discovers over both windows together" in comparison
    compared = re.findall(r'<tr class="[^"]*" data-value="([^"]*)"', comparison)
    assert sorted(html.unescape(v) for v in compared) == sorted(found)


def test_a_listed_candidate_is_re_estimated(signed_in: FlaskClient) -> None:
    reply = signed_in.post(PAGE, data={"csrf_token": _csrf(signed_in, PAGE),
                                       "candidates": "zoo\nxyz"})
    assert reply.status_code == 200
    estimates = _section(reply.get_data(as_text=True), "estimates")
    api = _api(signed_in, f"{API}/estimates", candidates=["zoo", "xyz"])
    drawn = _bars(estimates)
    assert drawn == {row["value"]: (row["detected"], row["frequency"],
                                    row["frequency_ci_low"], row["frequency_ci_high"])
                     for row in api["rows"]}
    assert drawn["zoo"][0]
    assert 'data-stage="re-estimate"' in estimates
    assert "Second stage: the 2 listed values re-estimated, without a walk." in estimates
    assert "Every value listed" in estimates
    # A value that cannot be one is refused with a page that says why.
    bad = signed_in.post(PAGE, data={"csrf_token": _csrf(signed_in, PAGE),
                                     "candidates": "toolong"})
    assert "value is longer than 3 UTF-8 bytes" in html.unescape(bad.get_data(as_text=True))


def test_downloads_without_candidates_are_the_apis_answers(signed_in: FlaskClient) -> None:
    for what, path in (("estimates", "estimates"), ("series", "series")):
        reply = signed_in.get(f"{PAGE}/download/{what}.json")
        assert reply.status_code == 200, reply.get_data(as_text=True)
        body, api = json.loads(reply.get_data()), _api(signed_in, f"{API}/{path}")
        assert body["rows" if what == "estimates" else "series"] == \
            api["rows" if what == "estimates" else "series"]
    csv = signed_in.get(f"{PAGE}/download/estimates.csv")
    api_csv = signed_in.get(f"{API}/estimates?format=csv", headers=ANALYST_HEADERS)
    assert csv.status_code == 200 and csv.get_data() == api_csv.get_data()


def test_a_second_render_reuses_the_walks_until_new_reports_change_a_window(
        app: Flask, signed_in: FlaskClient) -> None:
    """The page's walks (its window, the series' whole window and points, both compared
    windows) are computed once per process; reports ingested since change the windows they
    fall in, so those are walked again; folding them changes no window's sum, and no walk."""
    storage: Storage = app.extensions["chorus.storage"]
    WALKS.clear()
    first = signed_in.get(PAGE).get_data(as_text=True)
    walked = WALKS.misses
    assert walked >= 4  # the whole window, three hourly points, the two compared halves
    again = signed_in.get(PAGE).get_data(as_text=True)
    # Every walk of the second render came from the cache.
    assert WALKS.misses == walked and WALKS.hits >= walked
    for name in ("estimates", "series", "comparison"):
        assert _section(again, name) == _section(first, name)
    # New reports in the last hour, through the ingest route, not yet folded.
    config = _api(signed_in, API)
    rng = random.Random(20261218)  # the tests' reports: seeded, never the client's
    reports = [make_report(config, WORDS[i % len(WORDS)], rng, now=NOW - HOUR / 2)
               for i in range(500)]
    sent = signed_in.post("/v1/reports", json={"reports": reports})
    assert sent.status_code == 200 and sent.get_json()["accepted"] == 500
    before = WALKS.misses
    assert "dog" in signed_in.get(PAGE).get_data(as_text=True)  # streamed: read it whole
    assert WALKS.misses > before, "the windows holding the new reports are walked again"
    # Folding moves them from the tail into the statistics: every window sums the same.
    assert fold(storage, clock=app.extensions["chorus.clock"]) == 500
    before, hits = WALKS.misses, WALKS.hits
    assert "dog" in signed_in.get(PAGE).get_data(as_text=True)
    assert WALKS.misses == before and WALKS.hits > hits


def test_the_page_is_sent_as_it_renders_saying_what_it_computes(
        app: Flask, signed_in: FlaskClient) -> None:
    """The page's top and a line saying what is being computed leave before any walk starts;
    each section's result then follows its line (which the stylesheet then hides); a page
    closed early (the browser gone) gives its query slot back."""
    WALKS.clear()
    reply = signed_in.get(PAGE)
    assert reply.status_code == 200 and reply.is_streamed
    chunks = (chunk.decode() for chunk in reply.response)
    sent = ""
    while 'class="meta pending"' not in sent:
        sent += next(chunks)
    assert WALKS.misses == 0, "nothing was walked before the first line went out"
    page = sent + "".join(chunks)
    reply.close()
    assert WALKS.misses > 0
    for name in ("estimates", "series", "comparison"):
        section = _section(page, name)
        line, result = section.split('class="meta pending"', 1)[1].split("</p>", 1)
        assert "…" in line and "<" in result  # the result follows its line
    with signed_in.get("/static/chorus.css") as css:
        assert ".pending:not(:last-child) { display: none; }" in css.get_data(as_text=True)
    # More pages left half-read than the worker computes at once: each gave its slot back.
    for _ in range(app.config["CHORUS"]["QUERY_CONCURRENCY"] + 1):
        left = signed_in.get(PAGE)
        next(iter(left.response))
        left.close()
    assert signed_in.get(PAGE).status_code == 200
