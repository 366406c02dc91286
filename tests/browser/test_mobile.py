"""Every dashboard page at a phone's width (390 px) and a desktop's (1280 px), in Debian's
Chromium (issue 35 #5): nothing scrolls the page sideways (wide tables scroll in their own
box), every table has a caption, and a skip link leads past the header to the content."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers.live import LiveCollector, SeededCampaign, seed_distribution, seed_record

if TYPE_CHECKING:
    from playwright.sync_api import Page

Screenshot = Callable[["Page", str], Path]
DESIGN = ("/design?kind=categories&categories=chrome%0Afirefox%0Asafari&epsilon=1&users=5000"
          "&distribution=chrome%3D0.6%2Cfirefox%3D0.3%2Csafari%3D0.1&installs=10000"
          "&start=2026-01-01&periods=30&budget=4")


def _overflow(page: Page) -> dict[str, object]:
    return page.evaluate("""() => ({
        width: document.documentElement.scrollWidth, viewport: window.innerWidth,
        wide: Array.from(document.querySelectorAll('body *')).filter(el => {
            const r = el.getBoundingClientRect();
            return r.width > 0 && r.right > window.innerWidth + 1 && !el.closest('table');
        }).map(el => `${el.tagName} ${el.getAttribute('class') || ''} in #${
            (el.closest('section') || {}).id}`).slice(0, 5),
        uncaptioned: Array.from(document.querySelectorAll('table'))
            .filter(t => !t.caption || !t.caption.textContent.trim()).map(t => t.id)})""")


@pytest.mark.parametrize("width", [390, 1280])
def test_no_page_scrolls_sideways_and_every_table_has_a_caption(
        page: Page, live_collector: LiveCollector, seeded: dict[str, SeededCampaign],
        width: int, screenshot: Screenshot) -> None:
    seed_distribution(live_collector)
    seed_record(live_collector)
    live_collector.fold()
    board = _board(live_collector, seeded, f"Weekly review ({width} px)")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_collector.url + "/login")
    assert _overflow(page) == {"width": width, "viewport": width, "wide": [],
                               "uncaptioned": []}, "/login"
    page.fill("#token", live_collector.admin_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    paths = ["/", *(f"/campaigns/{name}" for name in
                    (*seeded, "load_time_percentiles", "crashes")), DESIGN,
             "/boards", board]
    for path in paths:
        page.goto(live_collector.url + path)
        page.wait_for_load_state("networkidle")
        found = _overflow(page)
        assert found == {"width": width, "viewport": width, "wide": [], "uncaptioned": []}, \
            path
        assert page.locator("main h1").count() == 1, path  # the page itself, not an error
    screenshot(page, f"design-{width}")
    # The skip link: first in the tab order, and it takes the focus past the header.
    page.goto(live_collector.url + "/campaigns/browser")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def _board(live: LiveCollector, seeded: dict[str, SeededCampaign], name: str) -> str:
    """A board with a panel of each section from two campaigns, saved over the API."""
    status, board = live.request("POST", "/v1/boards", token=live.analyst_token,
                                 body={"name": name})
    assert status == 201, board
    for name in list(seeded)[:2]:
        for section in ("estimates", "series"):
            status, body = live.request("POST", f"/v1/boards/{board['id']}/panels",
                                        token=live.analyst_token,
                                        body={"campaign": name, "section": section})
            assert status == 201, body
    return f"/boards/{board['id']}"


_CONTRAST = """() => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = c => { const [r, g, b] = c.map(v => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05); };
  const ground = el => { for (; el; el = el.parentElement) {
      const bg = getComputedStyle(el).backgroundColor;
      if (!bg.startsWith('rgba(0, 0, 0, 0)') && bg !== 'transparent') return rgb(bg); }
    return [255, 255, 255]; };
  const worst = {};
  for (const sel of ['body', 'main p.meta', 'main a', 'thead th', 'td.num', 'button',
                     'button.primary', 'legend', '.notice', 'h1']) {
    const el = document.querySelector(sel);
    if (el) worst[sel] = Math.round(ratio(rgb(getComputedStyle(el).color), ground(el)) * 10) / 10;
  }
  return {ground: rgb(getComputedStyle(document.body).backgroundColor), ratios: worst};
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_dark_mode_follows_the_system_and_every_text_stays_readable(
        page: Page, live_collector: LiveCollector, seeded: dict[str, SeededCampaign],
        scheme: str, screenshot: Screenshot) -> None:
    page.emulate_media(color_scheme=scheme)
    page.goto(live_collector.url + "/login")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    page.goto(live_collector.url + "/campaigns/browser")
    found = page.evaluate(_CONTRAST)
    luminance = sum(found["ground"]) / 3
    assert (luminance < 60) if scheme == "dark" else (luminance > 240), found["ground"]
    # WCAG AA: 4.5 for text; every sampled text on its own background.
    assert len(found["ratios"]) >= 8 and min(found["ratios"].values()) >= 4.5, found["ratios"]
    screenshot(page, f"campaign-browser-{scheme}")
