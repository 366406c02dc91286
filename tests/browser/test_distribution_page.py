"""A distribution campaign's page in Debian's Chromium: one bar per bucket and the quantile
markers carry the JSON API's numbers, the tables list every quantile and bucket, and the page
requests nothing from any other host (checked by the ``page`` fixture). A Square Wave
campaign's page, whose answer states no intervals, draws no band and says why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from helpers.live import (
    DISTRIBUTION_SPEC,
    LiveCollector,
    lognormal,
    seed_campaign,
    seed_distribution,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

Screenshot = Callable[["Page", str], Path]


def test_the_histogram_and_quantiles_are_the_apis_numbers(
        page: Page, live_collector: LiveCollector, screenshot: Screenshot) -> None:
    seeded = seed_distribution(live_collector)
    name = seeded.name
    page.goto(live_collector.url + f"/campaigns/{name}?ranges=1:4")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    assert page.url.startswith(live_collector.url + f"/campaigns/{name}")
    api = live_collector.get_json(f"/v1/campaigns/{name}/estimates?range=1:4")
    assert api["n"] == seeded.accepted

    drawn = page.eval_on_selector_all(
        "#estimates svg.histogram rect.bucket",
        "rs => rs.map(r => [r.dataset.lo, r.dataset.hi, r.dataset.estimate, r.dataset.ciLow, "
        "r.dataset.ciHigh])")
    assert len(drawn) == 64  # one bar per bucket
    for bar, bucket in zip(drawn, api["histogram"], strict=True):
        assert [float(x) for x in bar] == [bucket["lo"], bucket["hi"], bucket["value"],
                                           bucket["ci_low"], bucket["ci_high"]]
    markers = page.eval_on_selector_all(
        "#estimates svg.histogram g.quantile",
        "gs => gs.map(g => [g.dataset.label, g.dataset.estimate, g.dataset.ciLow, "
        "g.dataset.ciHigh])")
    assert [(m[0], float(m[1]), float(m[2]), float(m[3])) for m in markers] == [
        (f"p{q['q'] * 100:g}", q["value"], q["ci_low"], q["ci_high"])
        for q in api["quantiles"]]
    # The text alternative: the quantiles, the mean and the range in the table.
    table = page.locator("#quantiles-table tbody tr")
    assert table.count() == len(api["quantiles"]) + 1 + len(api["ranges"])
    assert "share in [1, 4]" in page.locator("#quantiles-table").inner_text()
    assert page.locator("#histogram-table tbody tr").count() == 64
    # The series follows p50, p95, p99 and the mean, one point per day.
    series = page.eval_on_selector_all("#series svg.chart g.series",
                                       "gs => gs.map(g => g.dataset.label)")
    assert series == ["p50", "p95", "p99", "mean"]
    screenshot(page, "campaign-distribution")


def test_a_square_wave_page_draws_no_intervals(
        page: Page, live_collector: LiveCollector, screenshot: Screenshot) -> None:
    spec = {**DISTRIBUTION_SPEC, "name": "load_time_sw", "mechanism": "sw",
            "params": {"buckets": 64, "scale": "log"}}
    seeded = seed_campaign(live_collector, spec, [lognormal(2.0, 0.6, 0.1, 20.0)] * 2, 4_000,
                           np.random.default_rng(20261202))
    page.goto(live_collector.url + f"/campaigns/{seeded.name}")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    api = live_collector.get_json(f"/v1/campaigns/{seeded.name}/estimates")
    assert api["n"] == seeded.accepted and api["extra"]["intervals"].startswith("none: ")
    drawn = page.eval_on_selector_all(
        "#estimates svg.histogram rect.bucket",
        "rs => rs.map(r => [r.dataset.estimate, r.dataset.ciLow, r.dataset.ciHigh])")
    assert drawn == [[repr(b["value"]), "", ""] for b in api["histogram"]]
    assert page.locator("#estimates svg.histogram polygon.band").count() == 0
    assert page.locator("#estimates svg.histogram rect.span").count() == 0
    markers = page.eval_on_selector_all(
        "#estimates svg.histogram g.quantile",
        "gs => gs.map(g => [g.dataset.label, g.dataset.estimate, g.dataset.ciLow])")
    assert markers == [[f"p{q['q'] * 100:g}", repr(q["value"]), ""] for q in api["quantiles"]]
    assert "hierarchical-histogram (hh)" in page.locator("#no-intervals").inner_text()
    cells = page.locator("#quantiles-table tbody tr td:nth-child(4)").all_inner_texts()
    assert cells == ["none"] * (len(api["quantiles"]) + 1)
    # The series: a line per statistic, no band.
    assert page.locator("#series svg.chart polyline.line").count() == 4
    assert page.locator("#series svg.chart polygon.band").count() == 0
    screenshot(page, "campaign-distribution-sw")
