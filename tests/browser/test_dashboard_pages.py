"""The dashboard in Debian's Chromium: sign-in, the numbers the pages draw against the JSON
API's, the series, a planted change, the designer, string campaigns. Every page is checked
by the ``page`` fixture for requests to any other host and for script errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING

import pytest

from helpers.live import HOMEPAGES, LiveCollector, SeededCampaign, seed_campaigns

if TYPE_CHECKING:
    from playwright.sync_api import Page

Screenshot = Callable[["Page", str], Path]


def sign_in(page: Page, live: LiveCollector, token: str | None = None,
            path: str = "/") -> None:
    page.goto(live.url + path)
    page.fill("#token", token or live.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()


def drawn_bars(page: Page, section: str) -> dict[str, tuple[float, float, float]]:
    """label → (estimate, ci_low, ci_high) of every bar the section's chart drew."""
    found = page.eval_on_selector_all(
        f"#{section} svg.chart g.bar",
        "gs => gs.map(g => [g.dataset.label, g.dataset.estimate, g.dataset.ciLow, "
        "g.dataset.ciHigh, g.querySelectorAll('.whisker line').length])")
    bars = {}
    for label, estimate, low, high, whisker_lines in found:
        assert whisker_lines == 3, f"{label}: a whisker is a line and two caps"
        bars[label] = (float(estimate), float(low), float(high))
    return bars


def test_sign_in_a_wrong_token_and_the_campaign_list(page: Page, live_collector: LiveCollector,
                                                     seeded: dict[str, SeededCampaign],
                                                     screenshot: Screenshot) -> None:
    page.goto(live_collector.url + "/campaigns/browser")
    assert "/login" in page.url
    screenshot(page, "login")
    page.fill("#token", "not-the-token")
    page.click("form.login button[type=submit]")
    assert page.locator("#refused").is_visible()
    assert "/login" in page.url
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    assert page.url == live_collector.url + "/campaigns/browser"  # where it was going
    cookie = next(c for c in page.context.cookies() if c["name"] == "chorus_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert live_collector.analyst_token not in cookie["value"]
    page.goto(live_collector.url + "/")
    rows = page.locator("table.campaigns tbody tr")
    assert rows.count() == 3
    for name, campaign in seeded.items():
        row = page.locator(f'tr[data-campaign="{name}"]')
        assert f"{campaign.accepted:,}" in row.inner_text()
    screenshot(page, "campaigns")


def test_bars_and_whiskers_are_the_apis_numbers(page: Page, live_collector: LiveCollector,
                                                seeded: dict[str, SeededCampaign],
                                                screenshot: Screenshot) -> None:
    sign_in(page, live_collector, path="/campaigns/browser")
    api = live_collector.get_json("/v1/campaigns/browser/estimates")
    bars = drawn_bars(page, "estimates")
    assert len(bars) == len(api["rows"]) == 5  # one bar per category
    for row in api["rows"]:
        assert bars[row["value"]] == (row["frequency"], row["frequency_ci_low"],
                                      row["frequency_ci_high"])
    table = page.locator("#estimates-table tbody tr")
    assert table.count() == 5
    assert page.locator("#n").inner_text() == f"{api['n']:,}"
    screenshot(page, "campaign-browser")

    page.goto(live_collector.url + "/campaigns/load_time")
    api = live_collector.get_json("/v1/campaigns/load_time/estimates")
    assert drawn_bars(page, "estimates") == {"mean": (api["mean"], api["ci_low"],
                                                      api["ci_high"])}
    screenshot(page, "campaign-load_time")


def test_the_series_has_one_point_per_bucket(page: Page, live_collector: LiveCollector,
                                             seeded: dict[str, SeededCampaign]) -> None:
    sign_in(page, live_collector, path="/campaigns/browser?step=day&top=5")
    api = live_collector.get_json("/v1/campaigns/browser/series?step=day&top=5")
    days = len(seeded["browser"].buckets)
    lines = page.eval_on_selector_all(
        "#series svg.chart g.series",
        "gs => gs.map(g => [g.dataset.label, Array.from(g.querySelectorAll('circle.point'))"
        ".map(c => [Number(c.dataset.start), c.dataset.estimate, c.dataset.ciLow, "
        "c.dataset.ciHigh]), g.querySelectorAll('polygon.band').length])")
    assert len(lines) == 5
    by_value = {s["value"]: s for s in api["series"]}
    for label, points, bands in lines:
        assert len(points) == days and bands >= 1
        expected = [(p["start"], repr(p["estimate"]), repr(p["ci_low"]), repr(p["ci_high"]))
                    for p in by_value[label]["points"]]
        assert [tuple(p) for p in points] == expected
        assert [p[0] for p in points] == seeded["browser"].buckets


@pytest.fixture
def changed(live_collector: LiveCollector) -> dict[str, SeededCampaign]:
    """The seeded campaigns with a change planted on day 4 of 8: safari +0.10, chrome −0.10."""
    campaigns = seed_campaigns(live_collector, change_day=4)
    live_collector.fold()
    return campaigns


def test_a_planted_change_is_flagged(page: Page, live_collector: LiveCollector,
                                     changed: dict[str, SeededCampaign],
                                     screenshot: Screenshot) -> None:
    # The page compares the data's two halves by default: days 0–3 against days 4–7.
    sign_in(page, live_collector, path="/campaigns/browser")
    flagged = page.eval_on_selector_all(
        "#comparison-table tbody tr[data-significant=true]", "rs => rs.map(r => r.dataset.value)")
    assert sorted(flagged) == ["chrome", "safari"]
    assert page.locator("#correction").inner_text() == "benjamini-hochberg"
    assert drawn_bars(page, "comparison").keys() == {"chrome", "safari", "edge", "firefox",
                                                      "other"}
    page.locator("#comparison").scroll_into_view_if_needed()
    screenshot(page, "comparison")


def test_no_change_is_not_flagged(page: Page, live_collector: LiveCollector,
                                  seeded: dict[str, SeededCampaign]) -> None:
    # The same distribution in both halves: with BH at 5%, a false flag on this seeded run
    # would happen with probability at most 0.05 (the rate itself is checked over many
    # repetitions in tests/shared/test_compare.py).
    sign_in(page, live_collector, path="/campaigns/browser")
    rows = page.locator("#comparison-table tbody tr")
    assert rows.count() == 5
    assert page.locator("#comparison-table tbody tr[data-significant=true]").count() == 0


def test_the_designers_prediction_matches_its_simulated_run(page: Page,
                                                             live_collector: LiveCollector,
                                                             screenshot: Screenshot) -> None:
    sign_in(page, live_collector, token=live_collector.admin_token, path="/design")
    page.fill("textarea[name=categories]", "chrome\nsafari\nedge\nfirefox\nother")
    page.fill("input[name=epsilon]", "1")
    page.fill("input[name=users]", "200000")
    page.fill("textarea[name=distribution]",
              "chrome = 0.45\nsafari = 0.25\nedge = 0.12\nfirefox = 0.10\nother = 0.08")
    page.click("#design button[type=submit]")
    page.wait_for_load_state()
    assert page.locator("#design-table tbody tr").count() >= 5
    rows = page.eval_on_selector_all(
        "#simulation-table tbody tr",
        "rs => rs.map(r => [r.dataset.label, Number(r.dataset.true), "
        "Number(r.dataset.estimate), Number(r.dataset.stdError), Number(r.dataset.predicted)])")
    assert len(rows) == 5
    # Monte-Carlo tolerance: each estimate within z of the truth in predicted standard errors
    # (Bonferroni over the 5 at α = 1e-4); the run's own plug-in SE within 5% of the
    # prediction (its relative error at n = 200,000 is about 1/√(2n) ≪ 1%).
    z = NormalDist().inv_cdf(1 - 1e-4 / 10)
    for label, true, estimate, std_error, predicted in rows:
        assert abs(estimate - true) <= z * predicted, label
        assert math.isclose(std_error, predicted, rel_tol=0.05), label
    screenshot(page, "design")
    assert page.locator("#create").is_visible()  # the admin may create it from here


def test_a_string_campaign_with_and_without_its_frequent_candidate(
        page: Page, live_collector: LiveCollector, seeded: dict[str, SeededCampaign],
        screenshot: Screenshot) -> None:
    sign_in(page, live_collector, path="/campaigns/homepage")
    assert "paste or upload candidate strings" in page.locator("#estimates").inner_text()
    page.fill("#candidates", "\n".join(HOMEPAGES))
    page.click("form.query button.primary")
    page.wait_for_load_state()
    api = live_collector.get_json("/v1/campaigns/homepage/estimates?"
                                  + "&".join(f"candidate={c}" for c in HOMEPAGES))
    assert drawn_bars(page, "estimates") == {
        r["value"]: (r["frequency"], r["frequency_ci_low"], r["frequency_ci_high"])
        for r in api["rows"]}
    assert page.locator("#unexplained").is_visible()
    assert page.locator("#estimates .warning").count() == len(api["warnings"])
    screenshot(page, "campaign-homepage")
    # The most frequent URL left out: the residual says candidates are missing, in words.
    page.fill("#candidates", "\n".join(HOMEPAGES[1:]))
    page.click("form.query button.primary")
    page.wait_for_load_state()
    warnings = page.locator("#estimates .warning").all_inner_texts()
    assert any("unexplained" in w or "missing from the candidates" in w for w in warnings)


def test_downloads_from_the_page(page: Page, live_collector: LiveCollector,
                                 seeded: dict[str, SeededCampaign]) -> None:
    sign_in(page, live_collector, path="/campaigns/browser")
    with page.expect_download() as caught:
        page.click("#estimates .downloads button:has-text('CSV')")
    download = caught.value
    assert download.suggested_filename == "browser-estimates.csv"
    status, api_csv = live_collector.request("GET", "/v1/campaigns/browser/estimates?format=csv",
                                             token=live_collector.analyst_token)
    assert status == 200
    assert Path(download.path()).read_bytes().decode() == api_csv  # CRLF rows, byte for byte
