"""A web app's site for the TypeScript client's browser tests: the browser bundles and one
page that loads the core bundle as ``window.chorus``, served on its own loopback origin (not
the collector's), and pages of it in a fresh browser context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.client_ts import browser_bundles
from helpers.site import static_site

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

APP_PAGE = """<!doctype html><title>app</title>
<script type="module">
import * as chorus from "./chorus.min.js";
window.chorus = chorus;
window.ready = true;
</script>"""


@contextmanager
def app_site(folder: Path) -> Iterator[str]:
    """The bundles and ``index.html`` written to ``folder`` and served; yields the origin."""
    browser_bundles(folder)
    (folder / "index.html").write_text(APP_PAGE)
    with static_site(folder) as origin:
        yield origin


def open_app_page(context: BrowserContext, site: str) -> Page:
    """``index.html`` of the site, once its module has loaded."""
    page = context.new_page()
    page.goto(site + "/index.html")
    page.wait_for_function("window.ready === true")
    return page
