"""Saved work and forms that keep what was typed, in Debian's Chromium at a phone's width and a
desktop's (issue 35 #7, #10): a RAPPOR page's candidates saved as a list become a link, a
board shows panels from two campaigns, and the designer answers a typo with the form as it
was typed; no page scrolls sideways."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from helpers.live import HOMEPAGES, LiveCollector, SeededCampaign

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _fits(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") == width, page.url


@pytest.mark.parametrize("width", [390, 1280])
def test_a_list_a_board_and_a_designer_typo(page: Page, live_collector: LiveCollector,
                                           seeded: dict[str, SeededCampaign],
                                           width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_collector.url + "/login")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()

    # The RAPPOR page: paste candidates, save them as a list; the list is then a GET link.
    page.goto(live_collector.url + "/campaigns/homepage")
    page.fill("#candidates", "\n".join(HOMEPAGES[:5]))
    page.fill("input[name=list_name]", "top five")
    page.click("button:has-text('Save list')")
    page.wait_for_load_state()
    page.goto(live_collector.url + "/campaigns/homepage?list=top%20five")
    shown = page.eval_on_selector_all("#estimates-table tbody tr",
                                      "rs => rs.map(r => r.dataset.value)")
    assert sorted(shown) == sorted(HOMEPAGES[:5])
    _fits(page, width)

    # A board with the browser estimates and the load-time series side by side.
    page.goto(live_collector.url + "/boards")
    page.fill("input[name=name]", f"daily {width}")
    page.click("button:has-text('Create')")
    page.wait_for_load_state()
    for campaign, section in (("browser", "estimates"), ("load_time", "series")):
        value = page.eval_on_selector_all(
            "select[name=show] option",
            f"os => os.map(o => [o.value, o.textContent]).find(o => o[1].includes("
            f"'{campaign}') && !o[1].includes('load_time_percentiles'))[0]")
        page.select_option("select[name=show]", value)
        page.select_option("select[name=section]", section)
        page.click("form.query button:has-text('Add')")
        page.wait_for_load_state()
    panels = page.eval_on_selector_all("section.panel",
                                       "ps => ps.map(p => [p.dataset.campaign, "
                                       "p.dataset.section, !!p.querySelector('svg.chart')])")
    assert panels == [["browser", "estimates", True], ["load_time", "series", True]]
    _fits(page, width)

    # The designer: a typo in the distribution keeps every field as typed and says why.
    page.goto(live_collector.url + "/design")
    page.fill("#distribution", "chrome=0.6,safari=lots")
    page.click("#design button.primary")
    page.wait_for_load_state()
    assert "cannot read 'safari=lots'" in page.locator("#design-error").inner_text()
    assert page.input_value("#distribution") == "chrome=0.6,safari=lots"
    _fits(page, width)
