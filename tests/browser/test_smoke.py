"""The browser machinery itself, before any dashboard page: Debian's Chromium opens the
collector's pages, screenshots are written, and the request recorder catches (and blocks) a
request to any other host."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page

from helpers.browser import SCREENSHOT_MAX_HEIGHT, RequestRecorder
from helpers.live import DAY, LiveCollector, SeededCampaign, seed_campaigns
from helpers.support import z_threshold


def test_chromium_opens_the_health_check_and_a_screenshot_is_saved(
        page: Page, live_collector: LiveCollector, requests_seen: RequestRecorder,
        screenshot: Callable[[Page, str], Path]) -> None:
    reply = page.goto(live_collector.url + "/healthz")
    assert reply is not None and reply.status == 200
    assert json.loads(page.inner_text("body"))["status"] == "ok"
    path = screenshot(page, "smoke-healthz")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert requests_seen.urls == [live_collector.url + "/healthz"]


def test_chromium_reads_the_openapi_document(page: Page, live_collector: LiveCollector,
                                             screenshot: Callable[[Page, str], Path]) -> None:
    reply = page.goto(live_collector.url + "/openapi.json")
    assert reply is not None and reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    document = reply.json()
    assert document["openapi"].startswith("3.1")
    assert "/v1/campaigns/{name}/estimates" in document["paths"]
    page_height = page.evaluate("document.documentElement.scrollHeight")
    assert page_height > SCREENSHOT_MAX_HEIGHT      # the long page the cap is for
    path = screenshot(page, "smoke-openapi")
    viewport = page.viewport_size
    assert viewport is not None
    assert png_size(path) == (viewport["width"], viewport["height"])


def test_a_short_page_is_captured_whole(page: Page, live_collector: LiveCollector,
                                        screenshot: Callable[[Page, str], Path]) -> None:
    page.set_content("<body style='margin:0'><div style='height:1500px'>tall</div></body>")
    path = screenshot(page, "smoke-short-page")
    assert png_size(path)[1] == 1500


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (bytes 16-24)."""
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_a_request_to_another_host_is_recorded_and_blocked(
        page: Page, live_collector: LiveCollector, requests_seen: RequestRecorder) -> None:
    page.goto(live_collector.url + "/healthz")
    # A page of the collector's origin that would load a script, an image and data from
    # elsewhere; none of them may leave the machine.
    page.set_content(
        '<script src="http://example.invalid/x.js"></script>'
        '<img src="https://cdn.example.invalid/logo.png">'
        "<script>fetch('http://example.invalid/x').catch(() => {"
        "document.title = 'blocked'})</script>")
    page.wait_for_function("document.title === 'blocked'")
    assert set(requests_seen.take_foreign()) == {
        "http://example.invalid/x.js", "https://cdn.example.invalid/logo.png",
        "http://example.invalid/x"}
    # Another port on the same machine is another host too.
    other = live_collector.url.rsplit(":", 1)[0] + ":9"
    page.evaluate("url => fetch(url).catch(() => null)", other + "/x")
    assert requests_seen.take_foreign() == [other + "/x"]
    assert requests_seen.problems() == []


# xfail_strict: if the recorder let this test pass, the run would fail.
@pytest.mark.xfail(raises=AssertionError, reason="a page reached another host: must fail")
def test_a_test_whose_page_reaches_another_host_fails(
        page: Page, live_collector: LiveCollector) -> None:
    page.goto(live_collector.url + "/healthz")
    page.evaluate("() => fetch('http://example.invalid/x').catch(() => null)")


@pytest.mark.xfail(raises=AssertionError, reason="an uncaught script error: must fail")
def test_a_test_whose_page_throws_fails(page: Page, live_collector: LiveCollector) -> None:
    page.goto(live_collector.url + "/healthz")
    page.add_script_tag(content="throw new Error('broken dashboard')")


def test_seeded_campaigns_answer_estimates_over_http(
        live_collector: LiveCollector, seeded: dict[str, SeededCampaign]) -> None:
    browser = live_collector.get_json("/v1/campaigns/browser/estimates")
    assert browser["n"] == seeded["browser"].accepted == 8 * 2_000
    assert {row["value"] for row in browser["rows"]} == set(seeded["browser"].truth[0])
    load_time = live_collector.get_json("/v1/campaigns/load_time/estimates")
    assert load_time["n"] == seeded["load_time"].accepted == 16_000
    assert len(seeded["homepage"].buckets) == 8
    assert seeded["homepage"].buckets[-1] - seeded["homepage"].buckets[0] == 7 * DAY
    assert seeded["homepage"].buckets[-1] == live_collector.clock() // DAY * DAY


@pytest.mark.parametrize("live_config", [{"FOLD_INTERVAL": 0}])
def test_a_change_planted_in_the_seed_is_in_the_estimates(live_collector: LiveCollector) -> None:
    """Each window's estimates lie within z standard errors of that window's true shares
    (the population is fixed: only the mechanism is random; Bonferroni over 2 × 5 rows)."""
    seeded = seed_campaigns(live_collector, days=6, change_day=3)["browser"]
    assert live_collector.fold() == 3 * 6 * 2_000  # no background folder: it was off
    z = z_threshold(1e-6, tests=10)
    for days in (range(0, 3), range(3, 6)):
        start, end = seeded.buckets[days.start], seeded.buckets[days.stop - 1] + DAY
        answer = live_collector.get_json(
            f"/v1/campaigns/browser/estimates?start={start}&end={end}")
        assert answer["n"] == 3 * 2_000
        for row in answer["rows"]:
            truth = sum(seeded.truth[d].get(row["value"], 0.0) for d in days) / len(days)
            assert abs(row["frequency"] - truth) <= z * row["frequency_std_error"], row
    before = [seeded.truth[d]["safari"] for d in range(3)]
    after = [seeded.truth[d]["safari"] for d in range(3, 6)]
    assert max(before) < 0.30 < min(after)  # 0.25, then 0.35: far beyond sampling noise
