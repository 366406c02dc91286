"""Headless Chromium for the browser tests: Debian's system browser driven by Playwright.

Playwright's pip wheel carries its driver (a Node.js binary and its package) and needs no
network; ``playwright install`` is never run: the browser is Debian's ``chromium`` (installed
by ``make services``), started as root, so without the sandbox, and with everything that would
reach out to Google's servers (component updates, sync, safe-browsing lists) turned off.

Every page records the URLs it requests and blocks any outside the collector's origin, so
"the dashboard works with no internet" is checked by every browser test, not by one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # playwright is imported by whoever launches a browser (a clear error)
    from playwright.sync_api import Page, Route, WebSocketRoute

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "MISSING_BROWSER", "RequestRecorder", "describe",
           "missing_browser", "save_screenshot"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # root cannot use Chromium's user-namespace sandbox
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
MISSING_BROWSER = ("Chromium is not installed at {path}: run `make services` (it installs "
                   "Debian's chromium and chromium-driver); the browser tests never skip")
# Schemes that never leave the browser.
_LOCAL_SCHEMES = frozenset({"data", "blob", "about"})
_SCREENSHOT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,80}")


def missing_browser() -> str | None:
    """Why the browser tests cannot start, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return MISSING_BROWSER.format(path=CHROMIUM)
    return None


@dataclass
class RequestRecorder:
    """Every URL a browser context requested (``urls``); those outside ``origin`` (scheme,
    host and port, e.g. ``http://127.0.0.1:41234``) are blocked and kept in ``foreign``, and
    uncaught script errors in ``page_errors``. A test that expects foreign requests takes them
    with :meth:`take_foreign`; any left make the test fail."""

    origin: str
    urls: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def allows(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme in _LOCAL_SCHEMES:
            return True
        return f"{parts.scheme}://{parts.netloc}" == self.origin

    def on_route(self, route: Route) -> None:
        url = route.request.url
        self.urls.append(url)
        if self.allows(url):
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort("blockedbyclient")

    def on_web_socket(self, socket: WebSocketRoute) -> None:
        self.urls.append(socket.url)
        if self.allows(socket.url.replace("ws", "http", 1)):
            socket.connect_to_server()
        else:
            self.foreign.append(socket.url)
            socket.close(code=1008, reason="blocked: not the collector")

    def on_page_error(self, error: Exception) -> None:
        self.page_errors.append(str(error))

    def take_foreign(self) -> list[str]:
        """The foreign requests so far (the test expected them): no longer a failure."""
        taken, self.foreign = self.foreign, []
        return taken

    def problems(self) -> list[str]:
        """What makes a test fail: requests to other hosts, uncaught script errors."""
        found = [f"request to a host other than the collector ({self.origin}): {url}"
                 for url in self.foreign]
        found += [f"uncaught script error: {error}" for error in self.page_errors]
        return found


# A full-page capture makes Chromium lay out and paint the whole page at once: for a very long
# one (the OpenAPI document shown as text is tens of thousands of pixels tall) that took past
# Playwright's 30 s on a loaded machine, even clipped. The top of such a page is all a
# reviewer looks at, so a page taller than this is captured as its viewport only.
SCREENSHOT_MAX_HEIGHT = 6000


def save_screenshot(page: Page, directory: Path, name: str) -> Path:
    """A full-page PNG of ``page`` as ``directory/name.png`` (the viewport only where the page
    is taller than ``SCREENSHOT_MAX_HEIGHT``); returns its path."""
    if not _SCREENSHOT_NAME.fullmatch(name):
        raise ValueError(f"screenshot name {name!r}: use lowercase letters, digits, _ . -")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    height = page.evaluate("document.documentElement.scrollHeight")
    page.screenshot(path=str(path), full_page=height <= SCREENSHOT_MAX_HEIGHT)
    return path


def describe(problems: Iterable[str]) -> str:
    return "\n".join(f"  - {p}" for p in problems)
