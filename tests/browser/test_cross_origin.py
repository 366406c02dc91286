"""A page on a web app's own origin talks to the collector on another, in the real Chromium:
it reads a campaign's config and the answers to its reports (a browser client needs them to
know what was accepted), with ``credentials: "omit"``; it can never read them with
credentials, nor read any analyst route even holding a token; and a collector that lists
other origins keeps its answers from this page. The headers themselves:
tests/collector/http/test_cors.py."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from helpers.live import LiveCollector
from helpers.site import static_site
from helpers.support import ANALYST, NOW, campaign_spec

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Each call answers {"status", "body"} or {"error": the TypeError's name} when the browser
# kept the answer from the page.
_FETCH = """async ([url, init]) => {
  try {
    const reply = await fetch(url, init);
    return {status: reply.status, body: await reply.json(),
            retryAfter: reply.headers.get("Retry-After")};
  } catch (error) {
    return {error: error.name};
  }
}"""


@pytest.fixture
def app_page(browser: Browser, tmp_path: Path) -> Iterator[tuple[Page, str]]:
    """A blank page of the app's site (its own origin), in a fresh context."""
    (tmp_path / "index.html").write_text("<!doctype html><title>app</title><p>app</p>")
    with static_site(tmp_path) as origin:
        context = browser.new_context()
        page = context.new_page()
        page.goto(origin + "/index.html")
        yield page, origin
        context.close()


def _fetch(page: Page, url: str, **init: Any) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(_FETCH, [url, init])
    return result


def _report(config: dict[str, Any]) -> dict[str, Any]:
    precision = config["time_precision"]
    return {"report_id": secrets.token_hex(16), "digest": config["digest"],
            "time": int(NOW) // precision * precision, "payload": 1}


def test_a_page_elsewhere_reads_configs_and_report_answers_without_credentials(
        live_collector: LiveCollector, app_page: tuple[Page, str]) -> None:
    page, origin = app_page
    assert origin != live_collector.origin
    status, config = live_collector.request("POST", "/v1/campaigns",
                                            token=live_collector.admin_token,
                                            body=campaign_spec("survey"))
    assert status == 201
    base = live_collector.url
    omit = {"credentials": "omit"}
    fetched = _fetch(page, f"{base}/v1/campaigns/survey", **omit)
    assert fetched["status"] == 200 and fetched["body"]["digest"] == config["digest"]

    report = _report(config)
    post = {**omit, "method": "POST", "headers": {"Content-Type": "application/json"}}
    sent = _fetch(page, f"{base}/v1/reports", **post, body=json.dumps(report))
    assert sent["status"] == 201 and sent["body"]["status"] == "accepted", sent
    again = _fetch(page, f"{base}/v1/reports", **post, body=json.dumps(report))
    assert again["status"] == 200 and again["body"]["status"] == "duplicate", again
    conflict = _fetch(page, f"{base}/v1/reports", **post,
                      body=json.dumps({**report, "payload": 0}))
    assert conflict["status"] == 409  # a refusal is readable too: drop it, do not retry

    # With credentials the browser keeps every answer from the page: the collector never
    # allows them, so no cookie of the collector's site can tie a report to a browser.
    assert _fetch(page, f"{base}/v1/campaigns/survey", credentials="include") == \
        {"error": "TypeError"}
    # An analyst route is never opened, whatever the page holds.
    estimates = _fetch(page, f"{base}/v1/campaigns/survey/estimates", **omit,
                       headers={"Authorization": f"Bearer {ANALYST}"})
    assert estimates == {"error": "TypeError"}
    status, counted = live_collector.request("GET", "/v1/campaigns/survey/estimates",
                                             token=ANALYST)
    assert status == 200 and counted["n"] == 1  # the one report, counted once


@pytest.mark.parametrize("live_config", [{"CORS_ORIGINS": "https://app.example.com"}])
def test_a_collector_that_lists_other_origins_keeps_its_answers_from_the_page(
        live_collector: LiveCollector, app_page: tuple[Page, str]) -> None:
    page, _ = app_page
    status, _ = live_collector.request("POST", "/v1/campaigns", token=live_collector.admin_token,
                                       body=campaign_spec("survey"))
    assert status == 201
    assert _fetch(page, f"{live_collector.url}/v1/campaigns/survey", credentials="omit") == \
        {"error": "TypeError"}
