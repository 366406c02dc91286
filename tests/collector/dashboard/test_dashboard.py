"""The dashboard over Flask's test client: sign-in, sessions, CSRF, and pages whose numbers
are the API's (the real-browser tests are in tests/browser)."""

from __future__ import annotations

import html
import itertools
import json
import logging
import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, NOW, make_report

HOUR = 3600
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_BAR = re.compile(r'<g class="bar[^"]*" data-label="([^"]*)" data-estimate="([^"]*)" '
                  r'data-ci-low="([^"]*)" data-ci-high="([^"]*)">')


def csrf_token(client: FlaskClient, path: str = "/login") -> str:
    page = client.get(path).get_data(as_text=True)
    match = _CSRF.search(page)
    assert match, "the page has no CSRF token"
    return match.group(1)


def sign_in(client: FlaskClient, token: str = ANALYST) -> Any:
    return client.post("/login", data={"token": token, "csrf_token": csrf_token(client)})


def seed(client: FlaskClient, config: dict[str, Any], values: Callable[[int, int], Any],
         buckets: int = 4, per_bucket: int = 300, seed: int = 15) -> None:
    """Reports in ``buckets`` consecutive hours ending at NOW; ``values(bucket, i)``."""
    rng = random.Random(seed)
    for bucket in range(buckets):
        at = NOW - (buckets - 1 - bucket) * HOUR + 60
        reports = [make_report(config, values(bucket, i), rng, now=at)
                   for i in range(per_bucket)]
        reply = client.post(f"/v1/campaigns/{config['name']}/reports",
                            json={"reports": reports})
        assert reply.status_code == 200, reply.get_json()


@pytest.fixture
def signed_in(http: FlaskClient) -> FlaskClient:
    assert sign_in(http).status_code == 302
    return http


def bars(page: str) -> dict[str, tuple[float, float, float]]:
    return {html.unescape(label): (float(e), float(lo), float(hi))
            for label, e, lo, hi in _BAR.findall(page)}


# -- sign-in and sessions -----------------------------------------------------------------------

def test_pages_need_a_sign_in(http: FlaskClient) -> None:
    reply = http.get("/campaigns/x?start=2026-01-01")
    assert reply.status_code == 302
    assert reply.headers["Location"].startswith("/login?next=")


def test_a_wrong_token_is_refused(http: FlaskClient) -> None:
    reply = http.post("/login", data={"token": "guess", "csrf_token": csrf_token(http)})
    assert reply.status_code == 401
    assert "not the analyst or the admin token" in reply.get_data(as_text=True)
    assert http.get("/").status_code == 302  # still signed out


def test_sign_in_sets_a_strict_http_only_cookie_without_the_token(http: FlaskClient) -> None:
    reply = sign_in(http)
    assert reply.status_code == 302 and reply.headers["Location"] == "/"
    cookie = reply.headers["Set-Cookie"]
    assert cookie.startswith("chorus_session=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert ANALYST not in cookie
    assert http.get("/").status_code == 200


def test_sign_in_needs_the_csrf_token(http: FlaskClient) -> None:
    reply = http.post("/login", data={"token": ANALYST})
    assert reply.status_code == 400
    assert http.get("/").status_code == 302


def test_sign_out_needs_the_csrf_token_and_ends_the_session(signed_in: FlaskClient) -> None:
    assert signed_in.post("/logout").status_code == 400
    assert signed_in.get("/").status_code == 200
    token = csrf_token(signed_in, "/")
    assert signed_in.post("/logout", data={"csrf_token": token}).status_code == 302
    assert signed_in.get("/").status_code == 302


def test_after_sign_in_only_local_paths(http: FlaskClient) -> None:
    for target, expected in (("/campaigns/x", "/campaigns/x"), ("https://evil.test/", "/"),
                             ("//evil.test/", "/"), ("/\\evil.test", "/")):
        reply = http.post("/login", data={"token": ANALYST, "next": target,
                                          "csrf_token": csrf_token(http)})
        assert reply.headers["Location"] == expected


def test_changing_a_token_ends_its_sessions(make_app: Callable[..., Flask]) -> None:
    before = make_app(SECRET_KEY="k" * 32).test_client()
    sign_in(before)
    cookie = before.get_cookie("chorus_session")
    assert cookie is not None
    after = make_app(SECRET_KEY="k" * 32, ANALYST_TOKEN="a-new-analyst-token").test_client()
    after.set_cookie("chorus_session", cookie.value)
    assert after.get("/").status_code == 302
    same = make_app(SECRET_KEY="k" * 32).test_client()
    same.set_cookie("chorus_session", cookie.value)
    assert same.get("/").status_code == 200


def test_a_session_grants_nothing_on_the_api(signed_in: FlaskClient, create: Any) -> None:
    create("survey")
    assert signed_in.get("/v1/campaigns/survey/estimates").status_code == 401


def test_the_token_is_never_logged(http: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        sign_in(http, "a-wrong-token-value")
        sign_in(http, ADMIN)
        http.get("/")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "dashboard sign-in as admin" in text and "sign-in refused" in text
    assert ADMIN not in text and "a-wrong-token-value" not in text


def test_the_analyst_cannot_create_campaigns(signed_in: FlaskClient) -> None:
    token = csrf_token(signed_in, "/design")
    reply = signed_in.post("/design", data={"csrf_token": token, "action": "create"})
    assert reply.status_code == 403


# -- pages ------------------------------------------------------------------------------------

def test_campaign_list(signed_in: FlaskClient, create: Any, clock: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[i % 4], buckets=2, per_bucket=50)
    page = signed_in.get("/").get_data(as_text=True)
    assert 'data-campaign="survey"' in page and ">krr<" in page
    assert "4 categories" in page and ">100<" in page


def test_campaign_page_bars_are_the_apis_numbers(signed_in: FlaskClient, create: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "aabc"[i % 4] if i % 10 else "d")
    page = signed_in.get("/campaigns/survey").get_data(as_text=True)
    api = signed_in.get("/v1/campaigns/survey/estimates", headers=ANALYST_HEADERS).get_json()
    drawn = bars(page.split('id="series"')[0])
    assert set(drawn) == {"a", "b", "c", "d"}
    for row in api["rows"]:
        assert drawn[row["value"]] == (row["frequency"], row["frequency_ci_low"],
                                       row["frequency_ci_high"])
    assert f'<span id="n">{api["n"]:,}</span>' in page


def test_values_are_never_shortened(signed_in: FlaskClient, create: Any) -> None:
    long_a = "https://example.com/a/very/long/path/that/goes/on/" + "x" * 40 + "/one"
    long_b = long_a[:-3] + "two"
    config = create("urls", domain=[long_a, long_b, "short"])
    seed(signed_in, config, lambda bucket, i: [long_a, long_b, "short"][i % 3], buckets=1)
    page = signed_in.get("/campaigns/urls").get_data(as_text=True)
    table = page.split('id="estimates-table"')[1].split("</table>")[0]
    assert html.escape(long_a) in table and html.escape(long_b) in table


def test_mean_and_string_campaign_pages(signed_in: FlaskClient, create: Any) -> None:
    config = create("latency", mechanism="duchi")
    seed(signed_in, config, lambda bucket, i: (i * 37) % 100, buckets=2)
    page = signed_in.get("/campaigns/latency").get_data(as_text=True)
    api = signed_in.get("/v1/campaigns/latency/estimates", headers=ANALYST_HEADERS).get_json()
    assert bars(page.split('id="series"')[0])["mean"] == (api["mean"], api["ci_low"],
                                                          api["ci_high"])
    strings = create("pages", mechanism="rappor")
    seed(signed_in, strings, lambda bucket, i: ["home", "news", "mail"][i % 3], buckets=2)
    prompt = signed_in.get("/campaigns/pages").get_data(as_text=True)
    assert "paste or upload candidate strings" in prompt
    token = _CSRF.search(prompt)
    assert token is not None
    reply = signed_in.post("/campaigns/pages", data={"csrf_token": token.group(1),
                                                     "candidates": "home\nnews\nmail"})
    page = reply.get_data(as_text=True)
    assert reply.status_code == 200
    assert set(bars(page.split('id="series"')[0])) == {"home", "news", "mail"}
    assert 'id="unexplained"' in page
    assert signed_in.post("/campaigns/pages", data={"candidates": "home"}).status_code == 400


def test_downloads_are_the_apis_answers(signed_in: FlaskClient, create: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[(i + bucket) % 4])
    window = f"start={int(NOW) - 3 * HOUR}&end={int(NOW) + HOUR}"
    csv = signed_in.get(f"/campaigns/survey/download/estimates.csv?{window}")
    assert csv.headers["Content-Disposition"] == 'attachment; filename="survey-estimates.csv"'
    api = signed_in.get(f"/v1/campaigns/survey/estimates?{window}&format=csv",
                        headers=ANALYST_HEADERS)
    assert csv.get_data() == api.get_data()
    body = json.loads(signed_in.get(f"/campaigns/survey/download/estimates.json?{window}")
                      .get_data())
    api_body = signed_in.get(f"/v1/campaigns/survey/estimates?{window}",
                             headers=ANALYST_HEADERS).get_json()
    assert body["rows"] == api_body["rows"] and body["n"] == api_body["n"]


def test_pages_load_nothing_from_elsewhere_and_cannot_be_framed(signed_in: FlaskClient,
                                                                 create: Any) -> None:
    config = create("survey")
    seed(signed_in, config, lambda bucket, i: "abcd"[i % 4])
    for path in ("/", "/campaigns/survey", "/design", "/login"):
        reply = signed_in.get(path)
        assert reply.status_code == 200, path
        assert "default-src 'none'" in reply.headers["Content-Security-Policy"]
        assert reply.headers["X-Frame-Options"] == "DENY"
        page = reply.get_data(as_text=True)
        for url in re.findall(r'(?:src|href|action|formaction)="([^"]*)"', page):
            assert url.startswith(("/", "#")), (path, url)
        assert "<script" not in page


def test_bad_parameters_get_a_page_that_says_why(signed_in: FlaskClient, create: Any) -> None:
    create("survey")
    reply = signed_in.get("/campaigns/survey?start=yesterday")
    assert reply.status_code == 400
    assert "start must be a date like 2026-11-01" in reply.get_data(as_text=True)
    assert signed_in.get("/campaigns/nothing").status_code == 404


def test_sign_in_attempts_are_limited(http: FlaskClient) -> None:
    token = csrf_token(http)
    statuses = [http.post("/login", data={"token": f"guess-{i}", "csrf_token": token})
                .status_code for i in range(11)]
    assert statuses == [401] * 10 + [429]


def test_vector_campaign_page(signed_in: FlaskClient) -> None:
    domain = {"kind": "vector", "attributes": [{"name": "cpu", "lo": 0, "hi": 100},
                                               {"name": "memory", "lo": 0, "hi": 16}]}
    spec = {"name": "usage", "mechanism": "duchi_md", "epsilon": 2.0, "domain": domain,
            "min_batch_size": 1, "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    reply = signed_in.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config = reply.get_json()
    seed(signed_in, config, lambda bucket, i: [float(i % 100), float(i % 16)], buckets=2)
    page = signed_in.get("/campaigns/usage").get_data(as_text=True)
    api = signed_in.get("/v1/campaigns/usage/estimates", headers=ANALYST_HEADERS).get_json()
    assert bars(page.split('id="series"')[0]) == {
        row["attribute"]: (row["mean"], row["ci_low"], row["ci_high"]) for row in api["rows"]}
    assert 'class="series" data-label="cpu"' in page and 'data-label="memory"' in page


def test_the_admin_creates_a_campaign_from_the_designer(http: FlaskClient) -> None:
    sign_in(http, ADMIN)
    form = {"kind": "categories", "categories": "yes\nno", "epsilon": "1", "users": "5000",
            "time_precision": "86400"}
    page = http.get("/design", query_string=form).get_data(as_text=True)
    assert 'id="design-table"' in page and 'id="create"' in page
    token = _CSRF.search(page.split('id="create"')[1])
    assert token is not None
    reply = http.post("/design", data={**form, "csrf_token": token.group(1),
                                       "name": "consent", "mechanism": "krr"})
    assert reply.status_code == 302 and reply.headers["Location"] == "/campaigns/consent"
    config = http.get("/v1/campaigns/consent").get_json()
    assert (config["mechanism"], config["epsilon"], config["time_precision"]) == ("krr", 1.0,
                                                                                 86400)
    again = http.post("/design", data={**form, "csrf_token": token.group(1),
                                       "name": "consent", "mechanism": "oue"})
    assert again.status_code == 409  # a different campaign under a taken name
    kept = again.get_data(as_text=True)  # the figures, the create form and what was typed
    assert "already named &#39;consent&#39;; pick another name" in kept
    assert 'id="design-table"' in kept and 'name="name" required' in kept
    assert 'value="consent"' in kept.split('id="create"')[1]
    bad = http.get("/design", query_string={**form, "epsilon": "lots",
                                           "distribution": "yes=0.7,no=0.3"})
    page = bad.get_data(as_text=True)
    assert bad.status_code == 400 and "ε must be a number" in page
    # Every field as it was typed, the mistyped one included.
    assert 'name="epsilon" value="lots"' in page and ">yes=0.7,no=0.3</textarea>" in page
    assert ">yes\nno</textarea>" in page


def test_the_designer_reads_shares_in_the_cli_form_and_the_line_form(http: FlaskClient) -> None:
    sign_in(http, ADMIN)
    form = {"kind": "categories", "categories": "yes\nno", "epsilon": "1", "users": "5000"}
    pages = [http.get("/design", query_string={**form, "distribution": text})
             for text in ("yes=0.7,no=0.3", "yes = 0.7\nno = 0.3")]
    assert [p.status_code for p in pages] == [200, 200]
    for page in pages:
        assert 'id="simulation-table"' in page.get_data(as_text=True)
        assert 'data-label="yes" data-true="0.7"' in page.get_data(as_text=True)
    typo = http.get("/design", query_string={**form, "distribution": "yes=0.7,no=lots"})
    text = typo.get_data(as_text=True)
    assert typo.status_code == 400 and "the distribution: cannot read &#39;no=lots&#39;" in text
    assert ">yes=0.7,no=lots</textarea>" in text


_CELL = re.compile(r'<g class="cell" data-row="([^"]*)" data-column="([^"]*)" '
                   r'data-estimate="([^"]*)" data-std-error="([^"]*)" data-ci-low="([^"]*)" '
                   r'data-ci-high="([^"]*)"><title>([^<]*)</title>')


def _record_campaign(client: FlaskClient, name: str, mechanism: str) -> None:
    domain = {"kind": "record", "attributes": [
        {"name": "browser", "values": ["chrome", "firefox", "safari"]},
        {"name": "os", "values": ["linux", "mac"]},
        {"name": "crashed", "values": ["no", "yes"]}]}
    spec = {"name": name, "mechanism": mechanism, "epsilon": 2.0, "domain": domain,
            "min_batch_size": 1, "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    reply = client.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    seed(client, reply.get_json(), lambda bucket, i: {
        "browser": ["chrome", "chrome", "firefox", "safari"][i % 4], "os": ["linux", "mac"][i % 2],
        "crashed": "yes" if i % 7 == 0 else "no"}, buckets=2, per_bucket=400)


def test_a_conditional_not_estimable_at_this_n_says_so_on_the_page(
        signed_in: FlaskClient) -> None:
    """Safari in 1 record of 100 (8 of 800): P(· | browser=safari) is not estimable, and the
    page prints the words in those cells where the API has null shares."""
    domain = {"kind": "record", "attributes": [
        {"name": "browser", "values": ["chrome", "safari"]},
        {"name": "os", "values": ["linux", "mac"]}]}
    spec = {"name": "rare", "mechanism": "marginals", "epsilon": 2.0, "domain": domain,
            "min_batch_size": 1, "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    reply = signed_in.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    seed(signed_in, reply.get_json(), lambda bucket, i: {
        "browser": "safari" if i % 100 == 0 else "chrome", "os": ["linux", "mac"][i % 2]},
        buckets=2, per_bucket=400)
    api = signed_in.get("/v1/campaigns/rare/estimates", headers=ANALYST_HEADERS).get_json()
    given = next(c for c in api["joints"][0]["conditionals"] if c["given"] == "browser")
    assert given["not_estimable"] == ["safari"]
    page = signed_in.get("/campaigns/rare").get_data(as_text=True).split('id="series"')[0]
    assert page.count(">not estimable at this n</td>") == 2


def test_record_campaign_page_heat_maps_are_the_apis_numbers(signed_in: FlaskClient) -> None:
    _record_campaign(signed_in, "crashes", "marginals")
    assert "a record of 3 attributes: browser (3), os (2), crashed (2)" in \
        signed_in.get("/").get_data(as_text=True)
    page = signed_in.get("/campaigns/crashes").get_data(as_text=True)
    api = signed_in.get("/v1/campaigns/crashes/estimates", headers=ANALYST_HEADERS).get_json()
    estimates = page.split('id="series"')[0]
    assert bars(estimates) == {f"{m['attribute']}={r['value']}": (
        r["frequency"], r["ci_low"], r["ci_high"]) for m in api["marginals"] for r in m["rows"]}
    maps = estimates.split('<svg class="chart heatmap"')[1:]
    assert len(maps) == len(api["joints"]) == 3
    for drawn, joint in zip(maps, api["joints"], strict=True):
        cells = _CELL.findall(drawn)
        assert len(cells) == len(joint["cells"])
        first, second = joint["attributes"]
        for found, cell in zip(cells, joint["cells"], strict=True):
            assert [html.unescape(x) for x in found[:2]] == cell["values"]
            assert [float(x) for x in found[2:6]] == [
                cell["frequency"], cell["std_error"], cell["ci_low"], cell["ci_high"]]
            assert html.unescape(found[6]) == (
                f"{first}={cell['values'][0]}, {second}={cell['values'][1]}: "
                f"{cell['frequency']:.4g} [{cell['ci_low']:.4g}, {cell['ci_high']:.4g}]")
        test = joint["independence"]
        assert f'data-p-value="{test["p_value"]}"' in estimates
    assert estimates.count('<table class="estimates joint conditional"') == 6
    # A conditional row whose total is not told apart from 0 prints the words, not a number.
    missing = sum(len([c for c in conditional["cells"] if not c["estimable"]])
                  for joint in api["joints"] for conditional in joint["conditionals"])
    assert estimates.count(">not estimable at this n</td>") == missing
    for joint in api["joints"]:
        for power in joint["independence"]["power"]:
            assert f"at w = {power['cohens_w']}" in estimates
    for pair in ("browser,os", "browser,crashed", "os,crashed"):
        assert f'<option value="{pair}"' in page
    one = signed_in.get("/campaigns/crashes?joint=os,crashed").get_data(as_text=True)
    assert one.count('<svg class="chart heatmap"') == 1 and 'data-attributes="os,crashed"' in one
    assert '<option value="os,crashed" selected' in one
    refused = signed_in.get("/campaigns/crashes?joint=os,colour")
    assert refused.status_code == 400
    assert "pick a pair of this campaign&#39;s attributes" in refused.get_data(as_text=True)
    download = signed_in.get("/campaigns/crashes/download/estimates.csv?joint=os,crashed")
    assert download.get_data() == signed_in.get(
        "/v1/campaigns/crashes/estimates?joint=os,crashed&format=csv",
        headers=ANALYST_HEADERS).get_data()
    consistent = signed_in.get("/campaigns/crashes?postprocessing=consistent")
    assert consistent.status_code == 200 and "consistent: the collected marginals" in \
        consistent.get_data(as_text=True)


def test_a_record_campaign_of_marginals_only_has_no_joint(signed_in: FlaskClient) -> None:
    _record_campaign(signed_in, "sampled", "smp")
    page = signed_in.get("/campaigns/sampled").get_data(as_text=True)
    assert "heatmap" not in page and 'name="joint"' not in page
    assert "smp estimates each attribute's marginal; joints need mechanism marginals" in page
    assert page.count('<table class="estimates marginal"') == 3
    assert 'class="series" data-label="browser=chrome"' in page
    assert signed_in.get("/campaigns/sampled?joint=browser,os").status_code == 400


def test_a_heat_map_shades_by_estimate_and_says_what_is_unknown() -> None:
    from chorus_collector.dashboard.charts import HEAT_UNKNOWN, HeatCell, heat_colour, heatmap_chart

    cells = [HeatCell("a<b", "x", 0.5, 0.01, 0.48, 0.52), HeatCell("a<b", "y", -0.02, 0.01,
                                                                    -0.04, 0.0),
             HeatCell("c", "x", 0.25, 0.01, 0.23, 0.27), HeatCell("c", "y", None, None, None,
                                                                  None)]
    svg = str(heatmap_chart(cells, ["a<b", "c"], ["x", "y"], row_name="r", column_name="k",
                            title="t", description="d"))
    fills = re.findall(r'<g class="cell".*?<rect [^>]*fill="([^"]*)"/><text class="(\w+)"', svg)
    # The largest share is the darkest (light text), a negative estimate the lightest, the
    # unknown cell grey.
    assert fills == [(heat_colour(1.0), "light"), (heat_colour(0.0), "dark"),
                     (heat_colour(0.5), "dark"), (HEAT_UNKNOWN, "dark")]
    titles = re.findall(r'<g class="cell"[^>]*><title>([^<]*)</title>', svg)
    assert titles == ["r=a&lt;b, k=x: 0.5 [0.48, 0.52]", "r=a&lt;b, k=y: -0.02 [-0.04, 0]",
                      "r=c, k=x: 0.25 [0.23, 0.27]", "r=c, k=y: unknown (no reports)"]
    assert 'data-row="a&lt;b"' in svg and "<b" not in svg
    # Everything drawn lies inside the picture: the key of a 2-column grid too.
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))  # type: ignore[union-attr]
    rights = [float(x) + float(w) for x, w in
              re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]
    assert rights and max(rights) <= width


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6))
def test_chart_ticks_cover_every_value_drawn(low: float, span: float) -> None:
    """The axis runs from a tick at or below the lowest value to one at or above the highest,
    so no bar or whisker is drawn past the plot (0 to 0.24 once ended at the 0.2 tick)."""
    from chorus_collector.dashboard.charts import nice_ticks

    high = low + span
    ticks = nice_ticks(low, high)
    slack = 1e-9 * span  # float rounding, far below a pixel
    assert ticks[0] <= low + slack and ticks[-1] >= high - slack
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(ticks) >= 2 and len(steps) == 1
    assert nice_ticks(0.0, 0.24)[-1] >= 0.24
