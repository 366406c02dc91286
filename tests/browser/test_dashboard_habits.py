"""The daily habit in Debian's Chromium, at a phone's width and a desktop's (issue 35 #6, #7):
a relative range picked from the form keeps moving, a header click sorts the table, the admin
marks a release on the series from the page, and the page reloads itself when asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from helpers.live import LiveCollector, SeededCampaign

if TYPE_CHECKING:
    from playwright.sync_api import Page

DAY = 86400


@pytest.mark.parametrize("width", [390, 1280])
def test_a_range_a_sort_a_mark_and_a_reload(page: Page, live_collector: LiveCollector,
                                            seeded: dict[str, SeededCampaign],
                                            width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_collector.url + "/login")
    page.fill("#token", live_collector.admin_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    page.goto(live_collector.url + "/campaigns/browser")

    # The last 7 days, picked in the form: the address holds the range, not two dates.
    page.select_option("#last", "7d")
    page.click("#query button.primary")
    page.wait_for_load_state()
    assert "last=7d" in page.url and "start=&" in page.url + "&"
    now = int(live_collector.clock.now)
    api = live_collector.get_json(
        f"/v1/campaigns/browser/estimates?start={(now - 7 * DAY) // DAY * DAY}"
        f"&end={now // DAY * DAY + DAY}")
    assert page.locator("#n").inner_text() == f"{api['n']:,}"

    # A click on Frequency sorts the estimates, largest first; again, smallest first.
    page.click("#estimates-table thead a.sort:has-text('Frequency')")
    page.wait_for_load_state()
    shown = page.eval_on_selector_all("#estimates-table tbody tr",
                                      "rs => rs.map(r => r.dataset.value)")
    by_share = [row["value"] for row in sorted(api["rows"], key=lambda r: -r["frequency"])]
    assert shown == by_share and "last=7d" in page.url

    # The admin marks a release; the series draws it and lists it below the chart.
    release = now - 2 * DAY
    page.fill("#marks input[name=time]", str(release))
    page.fill("#marks input[name=text]", "v2.3 shipped")
    page.click("#marks button:has-text('Mark')")
    page.wait_for_load_state()
    assert page.locator("svg.chart g.mark").count() == 1
    assert page.locator("svg.chart g.mark").get_attribute("data-time") == str(release)
    assert "v2.3 shipped" in page.locator("ul.marks").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") == width

    # Reload every minute: the page says so in its head and keeps the choice in its form.
    page.select_option("#refresh", "60")
    page.click("#query button.primary")
    page.wait_for_load_state()
    assert page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "60"
