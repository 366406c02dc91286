"""Screenshots of the dashboard's main pages, for docs/dashboard.md: ``docs/screenshots/*.png``.

    .venv/bin/python docs/screenshots/take.py [--out DIR]

It uses the browser tests' own machinery (tests/helpers): a collector on loopback with a
fresh SQLite file, the three seeded campaigns (k-RR, a mean, RAPPOR: 2,000 simulated users a
day for 8 days, a change planted in the browser shares 3 days ago) and a distribution
(hierarchical histogram of load times, 8,000 users a day for 3 days), a record campaign
(browser × OS × crashed, 6,000 users a day for 3 days) and Debian's headless
Chromium, which may request nothing but the collector (the script fails if a page tries).
The data are seeded, so the pictures change only when the pages do.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from chorus_collector import create_app  # noqa: E402
from helpers.browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_FLAGS,
    RequestRecorder,
    describe,
    missing_browser,
    save_screenshot,
)
from helpers.live import (  # noqa: E402
    BROWSER_SHARES,
    BROWSERS,
    DAY,
    HOMEPAGES,
    LiveCollector,
    seed_campaigns,
    seed_distribution,
    seed_record,
    serving,
)
from helpers.support import ADMIN, ANALYST, FakeClock  # noqa: E402

DESIGN = urlencode({"kind": "categories", "categories": "\n".join(BROWSERS), "epsilon": "1",
                    "users": "200000", "time_precision": "86400",
                    "distribution": "\n".join(f"{b} = {s}" for b, s in
                                              zip(BROWSERS, BROWSER_SHARES, strict=True))})
# (file name, path, signed in): the pages docs/dashboard.md and the README show.
PAGES = [
    ("login", "/login", False),
    ("campaigns", "/", True),
    ("campaign-browser", "/campaigns/browser", True),
    ("campaign-load_time", "/campaigns/load_time", True),
    ("campaign-load_time_percentiles", "/campaigns/load_time_percentiles?ranges=1:4", True),
    ("campaign-homepage",
     "/campaigns/homepage?" + urlencode({"candidates": "\n".join(HOMEPAGES)}), True),
    ("campaign-crashes", "/campaigns/crashes", True),
    ("designer", "/design?" + DESIGN, True),
]
TOKEN_FIELD = "form input[type=password], form input[name=token]"


def sign_in(page: Page, live: LiveCollector, token: str) -> None:
    """Through the sign-in form, as a person would: the token is typed, never in a URL."""
    page.goto(live.url + "/login")
    page.locator(TOKEN_FIELD).first.fill(token)
    page.locator(TOKEN_FIELD).first.press("Enter")
    page.wait_for_load_state("networkidle")
    if page.url.rstrip("/").endswith("/login"):
        raise SystemExit("sign-in failed: still on /login")


def take(out: Path) -> list[Path]:
    problem = missing_browser()
    if problem:
        raise SystemExit(problem)
    # Today at noon, frozen: the last seeded day is today's.
    clock = FakeClock(time.time() // DAY * DAY + DAY / 2)
    saved = []
    with tempfile.TemporaryDirectory(prefix="chorus-screenshots-") as tmp:
        app = create_app({"DATABASE": str(Path(tmp) / "chorus.db"), "ADMIN_TOKEN": ADMIN,
                          "ANALYST_TOKEN": ANALYST, "LOG_LEVEL": "WARNING"}, clock=clock)
        with serving(app, clock) as live, sync_playwright() as playwright:
            seed_campaigns(live, change_day=5)
            seed_distribution(live)
            seed_record(live)
            live.fold()
            browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                 args=CHROMIUM_FLAGS)
            recorder = RequestRecorder(origin=live.origin)
            context = browser.new_context(viewport={"width": 1280, "height": 900},
                                          locale="en-US", timezone_id="UTC",
                                          service_workers="block")
            context.route(lambda url: True, recorder.on_route)
            page = context.new_page()
            page.on("pageerror", recorder.on_page_error)
            signed = False
            for name, path, signed_in in PAGES:
                if signed_in and not signed:
                    sign_in(page, live, ADMIN)  # the admin sees the designer's form too
                    signed = True
                reply = page.goto(live.url + path)
                if reply is None or reply.status != 200:
                    raise SystemExit(f"{path}: HTTP {reply.status if reply else '-'}")
                page.wait_for_load_state("networkidle")
                saved.append(save_screenshot(page, out, name))
                print(f"{path} -> {saved[-1]}")
            context.close()
            browser.close()
            if recorder.problems():
                raise SystemExit(f"the pages did what a dashboard must not:\n"
                                 f"{describe(recorder.problems())}")
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder for the PNG files (default: docs/screenshots)")
    take(parser.parse_args().out)


if __name__ == "__main__":
    main()
