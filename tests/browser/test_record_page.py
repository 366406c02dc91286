"""A record campaign's page in Debian's Chromium: the marginals' bars and each pair's heat map
carry the JSON API's numbers (every cell's estimate, standard error and interval, in its data
attributes and its title), the conditional tables and the independence test are shown, the
form's Pair asks for one joint, and the page requests nothing from any other host (checked by
the ``page`` fixture)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.live import LiveCollector, seed_record

if TYPE_CHECKING:
    from playwright.sync_api import Page

Screenshot = Callable[["Page", str], Path]


def _short(x: float) -> str:
    return f"{x:.4g}"  # how a chart's title prints a number (charts._number)


def test_the_heat_maps_and_marginals_are_the_apis_numbers(
        page: Page, live_collector: LiveCollector, screenshot: Screenshot) -> None:
    seeded = seed_record(live_collector)
    live_collector.fold()
    name = seeded.name
    page.goto(live_collector.url + f"/campaigns/{name}")
    page.fill("#token", live_collector.analyst_token)
    page.click("form.login button[type=submit]")
    page.wait_for_load_state()
    assert page.url.startswith(live_collector.url + f"/campaigns/{name}")
    api = live_collector.get_json(f"/v1/campaigns/{name}/estimates")
    assert api["kind"] == "record" and api["n"] == seeded.accepted

    # The marginals: one bar per attribute=value, with the API's estimate and interval.
    bars = page.eval_on_selector_all(
        "#estimates svg.chart:not(.heatmap) g.bar",
        "gs => gs.map(g => [g.dataset.label, g.dataset.estimate, g.dataset.ciLow, "
        "g.dataset.ciHigh])")
    assert [(b[0], float(b[1]), float(b[2]), float(b[3])) for b in bars] == [
        (f"{m['attribute']}={r['value']}", r["frequency"], r["ci_low"], r["ci_high"])
        for m in api["marginals"] for r in m["rows"]]
    assert page.locator("#estimates table.marginal").count() == 3

    # Every pair has a heat map whose cells are the API's cells, in row-major order.
    pairs = [list(p) for p in itertools.combinations(api["attributes"], 2)]
    assert [j["attributes"] for j in api["joints"]] == pairs
    maps = page.locator("#estimates section.joint svg.heatmap")
    assert maps.count() == len(pairs)
    for index, joint in enumerate(api["joints"]):
        cells = maps.nth(index).locator("g.cell").evaluate_all(
            "gs => gs.map(g => [g.dataset.row, g.dataset.column, "
            "g.dataset.estimate, g.dataset.stdError, g.dataset.ciLow, g.dataset.ciHigh, "
            "g.querySelector('title').textContent])")
        assert len(cells) == len(joint["cells"]) == joint["shape"][0] * joint["shape"][1]
        first, second = joint["attributes"]
        for drawn, cell in zip(cells, joint["cells"], strict=True):
            assert drawn[:2] == cell["values"]
            assert [float(x) for x in drawn[2:6]] == [cell["frequency"], cell["std_error"],
                                                      cell["ci_low"], cell["ci_high"]]
            assert drawn[6] == (f"{first}={cell['values'][0]}, {second}={cell['values'][1]}: "
                                f"{_short(cell['frequency'])} [{_short(cell['ci_low'])}, "
                                f"{_short(cell['ci_high'])}]")
        # The test's p-value and both conditional tables, one row per given value.
        section = page.locator("#estimates section.joint").nth(index)
        test = joint["independence"]
        shown = section.locator("p.independence")
        assert float(shown.get_attribute("data-p-value") or "nan") == test["p_value"]
        assert f"p = {test['p_value']:.3g}" in shown.inner_text()
        conditionals = section.locator("table.conditional")
        assert conditionals.count() == 2
        assert conditionals.nth(0).locator("tbody tr").count() == joint["shape"][0]
        assert conditionals.nth(1).locator("tbody tr").count() == joint["shape"][1]
    screenshot(page, "campaign-record")

    # The form's Pair asks for one joint; the page then shows that heat map only.
    page.select_option("#joint", "os,crashed")
    page.click("form#query button.primary")
    page.wait_for_load_state()
    assert "joint=os%2Ccrashed" in page.url
    one = live_collector.get_json(f"/v1/campaigns/{name}/estimates?joint=os,crashed")
    cells = page.eval_on_selector_all("#estimates svg.heatmap g.cell",
                                      "gs => gs.map(g => Number(g.dataset.estimate))")
    assert cells == [c["frequency"] for c in one["joints"][0]["cells"]]
    # Series and comparisons follow each value of each attribute.
    series = page.eval_on_selector_all("#series svg.chart g.series",
                                       "gs => gs.map(g => g.dataset.label)")
    assert series == ["browser=chrome", "browser=firefox", "browser=safari", "os=linux",
                      "os=mac", "os=windows"]
