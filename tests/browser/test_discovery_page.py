"""A discovery campaign's page in Debian's Chromium: without a candidate list its bars and
table are the JSON API's answer of what the walk found, the detected values drawn in the
accent colour; typing a list in the candidate box and pressing Update re-estimates it (the
second stage); the page requests nothing from any other host (checked by the ``page``
fixture)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from helpers.discoveryseed import SPEC, WORD_SHARES, WORDS
from helpers.live import LiveCollector, categorical, seed_campaign

if TYPE_CHECKING:
    from playwright.sync_api import Page

Screenshot = Callable[["Page", str], Path]


def _bars(page: Page) -> list[tuple[str, bool, float, float, float]]:
    drawn = page.eval_on_selector_all(
        "#estimates svg.chart g.bar",
        "gs => gs.map(g => [g.dataset.label, g.classList.contains('flagged'), "
        "g.dataset.estimate, g.dataset.ciLow, g.dataset.ciHigh])")
    return [(b[0], b[1], float(b[2]), float(b[3]), float(b[4])) for b in drawn]


def _expected(api: dict[str, Any]) -> list[tuple[str, bool, float, float, float]]:
    return [(r["value"], bool(r["detected"]), r["frequency"], r["frequency_ci_low"],
             r["frequency_ci_high"]) for r in api["rows"]]


def test_the_discovered_values_and_a_re_estimate_are_the_apis_numbers(
        page: Page, live_collector: LiveCollector, screenshot: Screenshot) -> None:
    seeded = seed_campaign(live_collector, SPEC, [categorical(WORDS, WORD_SHARES)] * 2,
                           20_000, np.random.default_rng(20261217))
    live_collector.fold()
    name = seeded.name
    page.goto(live_collector.url + f"/campaigns/{name}")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    assert page.url.startswith(live_collector.url + f"/campaigns/{name}")
    api = live_collector.get_json(f"/v1/campaigns/{name}/estimates")
    assert api["n"] == seeded.accepted == 40_000

    assert _bars(page) == _expected(api)
    assert {label for label, flagged, *_ in _bars(page) if flagged} == set(WORDS)
    flags = page.eval_on_selector_all(
        "#estimates-table tbody tr", "rs => rs.map(r => [r.dataset.value, r.dataset.detected])")
    assert flags == [[r["value"], "true" if r["detected"] else "false"] for r in api["rows"]]
    walk = page.locator("#discovery").inner_text()
    assert walk.startswith("Discovered by PEM's walk down the prefixes")
    assert page.locator("#series-discovery").count() == 1
    # The page was streamed; each "computing …" line is hidden once its result came.
    pending = page.locator(".pending")
    assert pending.count() == 3
    assert all(pending.nth(i).is_hidden() for i in range(3))
    screenshot(page, "campaign-discovery")

    # The second stage: the analyst's list, estimated from the final table.
    page.fill("#candidates", "zoo\nxyz")
    page.click("form.query button.primary")
    page.wait_for_load_state()
    again = live_collector.request("POST", f"/v1/campaigns/{name}/estimates",
                                   token=live_collector.analyst_token,
                                   body={"candidates": ["zoo", "xyz"]})
    assert again[0] == 200
    assert _bars(page) == _expected(again[1])
    assert page.locator("#discovery").get_attribute("data-stage") == "re-estimate"
    assert page.input_value("#candidates") == "zoo\nxyz"
