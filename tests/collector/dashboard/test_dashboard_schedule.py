"""The dashboard with a plan over time: a campaign's page says how one install reports and, for
a campaign with a schedule, shows every period up to now with what each estimates; the
designer page shows the plan, and creates the campaign with its schedule."""

from __future__ import annotations

import html
import random
import re

from flask.testing import FlaskClient

from chorus_shared.campaign import campaign_from_config
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, NOW, FakeClock, make_report

DAY = 86400
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
SPEC = {"name": "daily", "mechanism": "krr", "epsilon": 2.0, "domain": ["a", "b"],
        "min_batch_size": 5, "privacy": {"budget": 8.0},
        "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 30}}
PLAN_FORM = {"kind": "categories", "categories": "yes\nno", "epsilon": "", "users": "",
             "time_precision": "86400", "installs": "1000000", "cadence": "day",
             "start": "2026-03-02", "periods": "365", "budget": "8"}


def sign_in(client: FlaskClient, token: str = ANALYST) -> None:
    match = _CSRF.search(client.get("/login").get_data(as_text=True))
    assert match is not None
    reply = client.post("/login", data={"token": token, "csrf_token": match.group(1)})
    assert reply.status_code == 302


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", page))


def test_a_scheduled_campaign_page_shows_every_period(http: FlaskClient,
                                                      clock: FakeClock) -> None:
    config = http.post("/v1/campaigns", json=SPEC, headers=ADMIN_HEADERS).get_json()
    clock.now = NOW + 3 * DAY + 60
    rng = random.Random(3)
    reports = [make_report(config, rng.choice("ab"), rng, now=NOW + day * DAY + 600)
               for day, count in enumerate([20, 0, 20]) for _ in range(count)]
    reply = http.post("/v1/campaigns/daily/reports", json={"reports": reports})
    assert reply.status_code == 200
    sign_in(http)
    page = http.get("/campaigns/daily").get_data(as_text=True)
    text = _text(page)
    reporting = campaign_from_config(config).reporting
    assert f'<dd id="reporting">{html.escape(reporting)}</dd>' in page
    assert '<option value="period" selected>day (the campaign’s periods)</option>' in page
    assert "One point per day of the campaign (1 day)" in text
    assert "Each point: each value's share among the installs active in that day" in text
    # Days 1 and 3 (no reports) are rows that say so; the table has a row per day and value.
    rows = re.findall(r'<td colspan="3" class="suppressed">([^<]*)</td>', page)
    assert rows == ["no reports in this interval"] * 4  # 2 days × 2 values
    assert text.count("2026-01-0") >= 8
    assert "Estimates pooled over the reports of the window" in text  # all data: 4 days
    # The comparison's default windows (the data's two halves) say what each estimates.
    assert "Baseline: each value's share among the installs active in the day from " \
        "2026-01-01" in text
    one_day = _text(http.get("/campaigns/daily", query_string={
        "start": "2026-01-01", "end": "2026-01-02"}).get_data(as_text=True))
    assert "Estimates each value's share among the installs active in the day from " \
        "2026-01-01" in one_day


def test_a_campaign_without_a_schedule_says_how_it_reports(http: FlaskClient) -> None:
    spec = {"name": "plain", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b"]}
    http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    sign_in(http)
    page = http.get("/campaigns/plain").get_data(as_text=True)
    assert ('<dd id="reporting">at most 1 report per install, ever, at ε = 1 each (1 in all), '
            "sent as the app reports</dd>") in page
    assert 'value="period"' not in page
    assert http.get("/campaigns/plain", query_string={"step": "period"}).status_code == 400


def test_the_designer_page_shows_the_plan_and_creates_the_campaign(http: FlaskClient) -> None:
    sign_in(http, ADMIN)
    page = http.get("/design", query_string=PLAN_FORM).get_data(as_text=True)
    text = _text(page)
    assert 'id="plan-table"' in page
    assert "Planned: 4 reports per install over 365 days from 2026-03-02" in text
    assert "Recommended: ε = 2 per report, 4 reports per install." in text
    assert 'data-epsilon="2.0" data-std-error="' in page and 'data-recommended="true"' in page
    assert "does not depend on the number of installs, the horizon or the budget" in text
    assert "per day: ε = 0.189" in text and "No injected reports" in text
    assert "random allocation" in text
    token = _CSRF.search(page.split('id="create"')[1])
    assert token is not None
    reply = http.post("/design", data={**PLAN_FORM, "csrf_token": token.group(1),
                                       "name": "planned", "mechanism": "krr"})
    assert reply.status_code == 302, reply.get_data(as_text=True)
    config = http.get("/v1/campaigns/planned").get_json()
    assert config["schedule"] == {"cadence": "day", "start": "2026-03-02", "periods": 365}
    assert config["epsilon"] == 2.0 and config["privacy"]["budget"] == 8.0
    assert config["worst_case"]["reporting"].startswith("4 reports per install")


def test_a_sparse_plan_is_warned_about_on_the_page(http: FlaskClient) -> None:
    sign_in(http)
    page = http.get("/design", query_string={**PLAN_FORM, "installs": "2000"})
    text = _text(page.get_data(as_text=True))
    assert page.status_code == 200
    assert "Warning: a day expects 21.9 reports, fewer than the campaign's min_batch_size " \
        "(100)" in text
    missing = http.get("/design", query_string={**PLAN_FORM, "start": ""})
    assert missing.status_code == 400
    assert "schedule.start must be a UTC date" in _text(missing.get_data(as_text=True))
