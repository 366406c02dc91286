"""Saved work (issue 35 #7): candidate lists by name that make a strings page a GET link,
saved views (a page's question), and boards of panels from several campaigns; on the
backend the run picks (the PostgreSQL pass runs these too)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from flask import Flask
from flask.testing import FlaskClient
from test_dashboard import bars, csrf_token, seed, sign_in

from chorus_collector.http.admission import QueryAdmission
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST_HEADERS, NOW, campaign_spec

HOUR = 3600
Create = Callable[..., dict[str, Any]]


@pytest.fixture
def signed_in(http: FlaskClient) -> FlaskClient:
    assert sign_in(http).status_code == 302
    return http


def _estimate_bars(page: str) -> dict[str, tuple[float, float, float]]:
    return bars(page.split('id="series"')[0])


def _rappor(http: FlaskClient, create: Create) -> None:
    config = create("pages", mechanism="rappor")
    seed(http, config, lambda bucket, i: ["home", "news", "mail"][i % 3], buckets=2)


def test_a_saved_list_makes_the_strings_page_a_link_and_its_downloads_work_by_get(
        signed_in: FlaskClient, create: Create) -> None:
    _rappor(signed_in, create)
    token = csrf_token(signed_in, "/campaigns/pages")
    saved = signed_in.post("/campaigns/pages/lists", data={
        "csrf_token": token, "candidates": "home\nnews\nmail", "list_name": "top <3>"})
    assert saved.status_code == 302
    link = saved.headers["Location"]
    match = re.fullmatch(r"/campaigns/pages\?list=(\d+)", link)
    assert match, link
    list_id = match.group(1)
    page = signed_in.get(link).get_data(as_text=True)
    posted = signed_in.post("/campaigns/pages", data={
        "csrf_token": token, "candidates": "home\nnews\nmail"}).get_data(as_text=True)
    assert set(_estimate_bars(page)) == {"home", "news", "mail"}
    assert _estimate_bars(page) == _estimate_bars(posted)  # the same question, by GET
    # The list is chosen in the select, its name escaped, and the page says its address.
    assert f'<option value="{list_id}" selected>top &lt;3&gt; (3 strings)</option>' in page
    assert "top <3>" not in page
    assert f'href="/campaigns/pages?list={list_id}"' in page
    # Enter in a field sends the form's first button: Update, not Save list.
    form = page.split('id="query"')[1].split("</form>")[0]
    assert form.index('class="primary">Update') < form.index(">Save list<")
    # Asked by GET, its tables sort by links that keep the list.
    assert f'<a class="sort" href="/campaigns/pages?list={list_id}&amp;sort=-frequency">' in page
    assert 'class="sort"' not in posted
    # ... by its name too, and the downloads answer the API's for the same candidates.
    by_name = signed_in.get("/campaigns/pages?" + urlencode({"list": "top <3>"}))
    assert _estimate_bars(by_name.get_data(as_text=True)) == _estimate_bars(page)
    csv = signed_in.get(f"/campaigns/pages/download/estimates.csv?list={list_id}")
    api = signed_in.post("/v1/campaigns/pages/estimates", headers=ANALYST_HEADERS,
                         json={"candidates": ["home", "news", "mail"], "format": "csv"})
    assert csv.status_code == 200 and csv.get_data() == api.get_data()
    # Typed strings go beside the chosen list's.
    more = signed_in.post("/campaigns/pages", data={
        "csrf_token": token, "list": list_id, "candidates": "shop"}).get_data(as_text=True)
    assert set(_estimate_bars(more)) == {"home", "news", "mail", "shop"}
    assert signed_in.get("/campaigns/pages?list=999").status_code == 404


def test_saving_needs_a_csrf_token_a_name_and_candidates(signed_in: FlaskClient,
                                                          create: Create) -> None:
    _rappor(signed_in, create)
    assert signed_in.post("/campaigns/pages/lists", data={
        "candidates": "home", "list_name": "x"}).status_code == 400
    token = csrf_token(signed_in, "/campaigns/pages")
    for data, said in (({"candidates": "home", "list_name": " "}, "name is one line"),
                       ({"candidates": "", "list_name": "x"}, "no candidate strings"),
                       ({"candidates": "home", "list_name": "a\nb"}, "name is one line")):
        reply = signed_in.post("/campaigns/pages/lists", data={"csrf_token": token, **data})
        assert reply.status_code == 400 and said in reply.get_data(as_text=True), data
    for path in ("/campaigns/pages/views", "/boards", "/boards/1/panels",
                 "/campaigns/pages/lists/1/remove", "/campaigns/pages/views/1/remove",
                 "/boards/1/panels/1/remove", "/boards/1/remove"):
        assert signed_in.post(path, data={"name": "b", "view_name": "v"}).status_code == 400, path


def test_saved_views_are_links_on_the_campaign_page_and_the_list(
        signed_in: FlaskClient, create: Create) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[(i + bucket) % 4])
    query = f"start={int(NOW) - 2 * HOUR}&step=bucket&sort=-frequency"
    token = csrf_token(signed_in, "/campaigns/survey")
    saved = signed_in.post("/campaigns/survey/views", data={
        "csrf_token": token, "query": query, "view_name": "last <2> hours"})
    assert saved.status_code == 302
    link = saved.headers["Location"]
    assert link.startswith("/campaigns/survey?") and "sort=-frequency" in link
    escaped = html.escape(link)
    for path in ("/campaigns/survey", "/"):
        page = signed_in.get(path).get_data(as_text=True)
        assert f'<a href="{escaped}">last &lt;2&gt; hours</a>' in page, path
    asked = signed_in.get(link).get_data(as_text=True)
    assert _estimate_bars(asked) == _estimate_bars(signed_in.get(
        f"/campaigns/survey?{query}").get_data(as_text=True))
    # A question the page would refuse is not saved.
    refused = signed_in.post("/campaigns/survey/views", data={
        "csrf_token": token, "query": "start=yesterday", "view_name": "bad"})
    assert refused.status_code == 400
    view_id = re.search(r'data-view="(\d+)"', signed_in.get("/campaigns/survey")
                        .get_data(as_text=True))
    assert view_id is not None
    removed = signed_in.post(f"/campaigns/survey/views/{view_id.group(1)}/remove",
                             data={"csrf_token": token})
    assert removed.status_code == 302
    assert "last &lt;2&gt; hours" not in signed_in.get("/").get_data(as_text=True)


def test_a_strings_pages_view_keeps_its_list(signed_in: FlaskClient, create: Create) -> None:
    _rappor(signed_in, create)
    token = csrf_token(signed_in, "/campaigns/pages")
    link = signed_in.post("/campaigns/pages/lists", data={
        "csrf_token": token, "candidates": "home\nmail", "list_name": "two"}).headers["Location"]
    page = signed_in.get(link).get_data(as_text=True)
    query = re.search(r'name="query" value="([^"]*)"', page)
    assert query is not None and "list=" in html.unescape(query.group(1))
    view = signed_in.post("/campaigns/pages/views", data={
        "csrf_token": token, "query": html.unescape(query.group(1)), "view_name": "two"})
    assert set(_estimate_bars(signed_in.get(view.headers["Location"]).get_data(as_text=True))
               ) == {"home", "mail"}


def _panels(page: str) -> dict[str, str]:
    """Each panel's HTML by its label."""
    found = {}
    for chunk in page.split('<section class="panel"')[1:]:
        label = re.search(r'<h2 id="[^"]*"><a href="[^"]*">([^<]*)</a>', chunk)
        assert label is not None
        found[html.unescape(label.group(1))] = chunk.split("</section>")[0]
    return found


def test_a_board_shows_panels_from_two_campaigns_with_the_apis_numbers(
        http: FlaskClient, create: Create) -> None:
    survey = create("survey")
    seed(http, survey, lambda bucket, i: "abcd"[(i + bucket) % 4])
    _rappor(http, create)
    assert sign_in(http).status_code == 302  # an analyst builds it
    token = csrf_token(http, "/boards")
    made = http.post("/boards", data={"csrf_token": token, "name": "Weekly <review>"})
    assert made.status_code == 302
    board = made.headers["Location"]
    listed = http.post("/campaigns/pages/lists", data={
        "csrf_token": token, "candidates": "home\nnews", "list_name": "front"})
    view = http.post("/campaigns/pages/views", data={
        "csrf_token": token, "query": listed.headers["Location"].split("?", 1)[1],
        "view_name": "front pages"})
    assert view.status_code == 302
    page = http.get(board).get_data(as_text=True)
    choices = dict((label, value) for value, label in
                   re.findall(r'<option value="([cv]\d+)">([^<]*)</option>', page))
    for show, section in ((choices["survey (the page&#39;s defaults)"], "estimates"),
                          (choices["pages: front pages"], "estimates"),
                          (choices["survey (the page&#39;s defaults)"], "series")):
        added = http.post(f"{board}/panels", data={"csrf_token": token, "show": show,
                                                   "section": section})
        assert added.status_code == 302
    page = http.get(board).get_data(as_text=True)
    assert "<h1>Weekly &lt;review&gt;</h1>" in page and "<review>" not in page
    assert "Weekly &lt;review&gt;</a>" in page  # in the header's menu
    panels = _panels(page)
    assert list(panels) == ["survey · estimates", "pages · estimates · front pages",
                            "survey · series"]
    api = http.get("/v1/campaigns/survey/estimates", headers=ANALYST_HEADERS).get_json()
    assert bars(panels["survey · estimates"]) == {
        r["value"]: (r["frequency"], r["frequency_ci_low"], r["frequency_ci_high"])
        for r in api["rows"]}
    api = http.post("/v1/campaigns/pages/estimates", json={"candidates": ["home", "news"]},
                    headers=ANALYST_HEADERS).get_json()
    assert bars(panels["pages · estimates · front pages"]) == {
        r["value"]: (r["frequency"], r["frequency_ci_low"], r["frequency_ci_high"])
        for r in api["rows"]}
    assert f'n = {api["n"]:,} reports' in panels["pages · estimates · front pages"]
    assert 'class="series" data-label="a"' in panels["survey · series"]
    assert 'href="/campaigns/survey#series"' in panels["survey · series"]
    # Removing the view removes its panel; removing a panel, the board itself.
    panel_id = re.search(r'data-panel="(\d+)"', page)
    assert panel_id is not None
    assert http.post(f"{board}/panels/{panel_id.group(1)}/remove",
                     data={"csrf_token": token}).status_code == 302
    assert list(_panels(http.get(board).get_data(as_text=True))) == [
        "pages · estimates · front pages", "survey · series"]
    assert http.post(f"{board}/remove", data={"csrf_token": token}).status_code == 302
    assert http.get(board).status_code == 404
    assert "Weekly" not in http.get("/boards").get_data(as_text=True)


def test_a_panel_whose_list_is_gone_says_so_and_the_others_are_drawn(
        http: FlaskClient, create: Create) -> None:
    survey = create("survey")
    seed(http, survey, lambda bucket, i: "abcd"[i % 4], buckets=2)
    _rappor(http, create)
    assert sign_in(http, ADMIN).status_code == 302  # the admin may too
    token = csrf_token(http, "/boards")
    board = http.post("/boards", data={"csrf_token": token, "name": "b"}).headers["Location"]
    link = http.post("/campaigns/pages/lists", data={
        "csrf_token": token, "candidates": "home", "list_name": "l"}).headers["Location"]
    http.post("/campaigns/pages/views", data={"csrf_token": token, "view_name": "v",
                                              "query": link.split("?", 1)[1]})
    page = http.get(board).get_data(as_text=True)
    view = re.search(r'<option value="(v\d+)">pages: v</option>', page)
    survey_choice = re.search(r'<option value="(c\d+)">survey', page)
    assert view is not None and survey_choice is not None
    for show in (view.group(1), survey_choice.group(1)):
        http.post(f"{board}/panels", data={"csrf_token": token, "show": show,
                                           "section": "estimates"})
    assert http.post(f"{board}/panels", data={"csrf_token": token, "show": "c999",
                                              "section": "estimates"}).status_code == 400
    assert http.post(f"{board}/panels", data={"csrf_token": token, "show": view.group(1),
                                              "section": "comparison"}).status_code == 400
    list_id = link.rsplit("=", 1)[1]
    assert http.post(f"/campaigns/pages/lists/{list_id}/remove",
                     data={"csrf_token": token}).status_code == 302
    panels = _panels(http.get(board).get_data(as_text=True))
    assert "has no saved list" in panels["pages · estimates · v"]
    assert set(bars(panels["survey · estimates"])) == set("abcd")


def test_a_board_waits_for_a_query_slot_like_a_page(make_app: Callable[..., Flask]) -> None:
    app = make_app(THREADS=4, QUERY_WAIT=0)
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("q"),
                       headers=ADMIN_HEADERS).get_json()
    seed(http, config, lambda bucket, i: "ab"[i % 2], buckets=1, per_bucket=20)
    assert sign_in(http).status_code == 302
    token = csrf_token(http, "/boards")
    board = http.post("/boards", data={"csrf_token": token, "name": "b"}).headers["Location"]
    choice = re.search(r'<option value="(c\d+)">q ', http.get(board).get_data(as_text=True))
    assert choice is not None
    http.post(f"{board}/panels", data={"csrf_token": token, "show": choice.group(1),
                                       "section": "estimates"})
    admission: QueryAdmission = app.extensions["chorus.queries"]
    held = [admission.admitted.acquire(blocking=False) for _ in range(admission.threads)]
    try:
        assert all(held)
        busy = http.get(board)
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "5"
    finally:
        for _ in held:
            admission.admitted.release()
    answered = bars(_panels(http.get(board).get_data(as_text=True))["q · estimates"])
    assert set(answered) == {"a", "b", "c", "d"}  # the campaign's categories
