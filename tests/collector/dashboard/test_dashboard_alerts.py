"""The campaign page lists the campaign's alert rules: each with its values significant now,
its last evaluation and its recent notifications, each linking to the comparison of exactly
the windows it was about; never the webhook's path."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html import unescape

import pytest
from flask import Flask
from test_dashboard import sign_in

from helpers.alerting import AFTER, BEFORE, HOUR, T0, alert_app, fold, send_reports
from helpers.receiver import Receiver
from helpers.support import NOW, FakeClock


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


def test_the_campaign_page_lists_rules_their_state_and_their_notifications(
        make_app: Callable[..., Flask], receiver: Receiver, clock: FakeClock) -> None:
    app, http, _ = alert_app(make_app, receiver)
    page = app.test_client()
    sign_in(page)
    assert 'id="alerts"' in page.get("/campaigns/changes").get_data(as_text=True)
    send_reports(http, BEFORE, T0 - 2 * HOUR, seed=1)
    send_reports(http, AFTER, T0 - HOUR, seed=2)
    clock.now = NOW + 30
    assert fold(app) == 4000 and len(receiver.received) == 1
    html = page.get("/campaigns/changes").get_data(as_text=True)
    section = html.split('id="alerts"', 1)[1].split("</section>", 1)[0]
    assert 'data-alert="changes-hourly"' in section
    assert "the last 1 hour against the 1 hour before; every value" in section
    assert '<td class="significant-now">a, d</td>' in section
    assert "windows ending 2026-01-01 00:00 UTC" in section and "token" not in section
    (link,) = re.findall(r'<a href="([^"]+)">triggered a, d</a>', section)
    compared = page.get(unescape(link)).get_data(as_text=True)
    for name, moment in (("baseline_start", "2025-12-31 22:00"),
                         ("baseline_end", "2025-12-31 23:00"),
                         ("current_start", "2025-12-31 23:00"),
                         ("current_end", "2026-01-01 00:00")):
        assert re.search(rf'name="{name}" value="{moment}"', compared), name
    assert 'data-value="a" data-significant="true"' in compared
