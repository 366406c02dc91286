"""Fixtures for the tests in a real browser: a collector served over HTTP on loopback
(``live_collector``), campaigns with simulated reports (``seeded``), Debian's Chromium driven
by Playwright (``browser``), a fresh page per test that records its requests and fails the
test on any outside the collector (``page``, ``requests_seen``) and full-page screenshots
(``screenshot``).

Every test here is marked ``browser`` and ``slow`` (``make quick`` leaves them out; ``make
test`` runs them). They run on SQLite only: the PostgreSQL pass re-runs the storage-facing
suites (tests/collector, tests/e2e), and a page does not care where the numbers are stored.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask

from helpers.browser import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    RequestRecorder,
    describe,
    missing_browser,
    save_screenshot,
)
from helpers.live import LiveCollector, SeededCampaign, seed_campaigns, serving
from helpers.seeded import SeededTemplate, sqlite_template
from helpers.support import FakeClock

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

_HERE = Path(__file__).parent
_RECORDER = pytest.StashKey[RequestRecorder]()
# Read at import, before the autouse fixture that clears CHORUS_* for each test.
_SCREENSHOTS = os.environ.get("CHORUS_SCREENSHOTS")
_screenshots_taken: list[Path] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    # After a test that passed, what its page did wrong fails it (a test that failed already
    # reports its own error first).
    result = yield
    recorder = item.stash.get(_RECORDER, None)
    if recorder is not None and recorder.problems():
        raise AssertionError(f"the page did what a dashboard must not:\n"
                             f"{describe(recorder.problems())}")
    return result


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _screenshots_taken:
        folder = _screenshots_taken[0].parent
        terminalreporter.write_line(f"browser screenshots: {len(_screenshots_taken)} in "
                                    f"{folder}")


@pytest.fixture
def live_config() -> dict[str, Any]:
    """Settings for ``live_collector`` beyond the suite's: a module or test overrides this
    fixture to serve another configuration."""
    return {}


@pytest.fixture
def live_collector(make_app: Callable[..., Flask], clock: FakeClock,
                   live_config: dict[str, Any]) -> Iterator[LiveCollector]:
    """A collector (``create_app`` on this test's SQLite file, the suite's admin and analyst
    tokens, the ``clock`` fixture, then ``live_config``) served on 127.0.0.1 at a free port,
    folding in the background every second; stopped at the end."""
    with serving(make_app(**{"FOLD_INTERVAL": 1, **live_config}), clock) as live:
        yield live


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> SeededTemplate:
    """``seed_campaigns`` once for the session, served and folded as in a test (2.7 s a
    test before): each test using ``seeded`` gets its own copy of the file (``database``)."""
    from chorus_collector import create_app
    from helpers.support import ADMIN, ANALYST

    path = tmp_path_factory.mktemp("seeded") / "template.db"
    clock = FakeClock()  # each test's starts at the same time
    app = create_app({"DATABASE": str(path), "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST,
                      "FOLD_INTERVAL": 1}, clock=clock)
    with serving(app, clock) as live:
        campaigns = seed_campaigns(live)
        live.fold()
    return sqlite_template(app, str(path), campaigns)


@pytest.fixture
def seeded(seeded_template: SeededTemplate,
           live_collector: LiveCollector) -> dict[str, SeededCampaign]:
    """``browser`` (k-RR), ``load_time`` (a mean) and ``homepage`` (RAPPOR) with 2,000
    simulated users a day for 8 days ending today (the clock's day), folded: this test's
    copy of the session's, served by ``live_collector``."""
    campaigns: dict[str, SeededCampaign] = copy.deepcopy(seeded_template.data)
    return campaigns


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, for the whole session (a fresh context per test)."""
    problem = missing_browser()
    if problem:
        pytest.fail(problem)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: run `make` (the dev extra has it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def requests_seen(request: pytest.FixtureRequest,
                  live_collector: LiveCollector) -> RequestRecorder:
    """What this test's pages requested; anything outside the collector fails the test."""
    recorder = RequestRecorder(origin=live_collector.origin)
    request.node.stash[_RECORDER] = recorder
    return recorder


@pytest.fixture
def page(browser: Browser, requests_seen: RequestRecorder) -> Iterator[Page]:
    """A page in a fresh context (its own cookies and storage): 1280×900, UTC, English; no
    service workers (their requests would bypass the recorder)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US",
                                  timezone_id="UTC", service_workers="block")
    context.route(lambda url: True, requests_seen.on_route)
    context.route_web_socket(lambda url: True, requests_seen.on_web_socket)
    new_page = context.new_page()
    new_page.on("pageerror", requests_seen.on_page_error)
    yield new_page
    context.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $CHORUS_SCREENSHOTS, else a folder of this run's temp dir."""
    if _SCREENSHOTS:
        return Path(_SCREENSHOTS).resolve()
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def screenshot(screenshot_dir: Path) -> Callable[[Page, str], Path]:
    """``screenshot(page, name)``: a full-page PNG, ``name.png`` in ``screenshot_dir``."""

    def take(page: Page, name: str) -> Path:
        path = save_screenshot(page, screenshot_dir, name)
        _screenshots_taken.append(path)
        print(f"screenshot: {path}")
        return path

    return take


@pytest.fixture(scope="module")
def ts_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web app's own site on its own loopback origin, with the TypeScript client's browser
    bundles and a page that loads the core one as ``window.chorus`` (helpers/ts_pages.py)."""
    from helpers.ts_pages import app_site

    with app_site(tmp_path_factory.mktemp("app-site")) as origin:
        yield origin


@pytest.fixture
def ts_context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context (its own IndexedDB and cookies) for the app's pages."""
    context = browser.new_context()
    yield context
    context.close()
