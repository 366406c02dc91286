"""The TypeScript client end to end in the real Chromium (issue 36): a page on the app's own
origin loads the browser bundle, and installs — each its own IndexedDB database — report to a
live collector on another origin. The estimates come out right; a reload keeps the ledger (no
second report, no second charge); and a hostile collector's tricks fail in the browser too:
a cookie it sets is never sent back, a config under another digest or with a larger ε is
refused, and nothing is requested from anywhere but the collector."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from helpers.live import LiveCollector
from helpers.support import ANALYST, NOW, campaign_spec

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

_PAGE = """<!doctype html><title>app</title>
<script type="module">
import * as chorus from "./chorus.min.js";
window.chorus = chorus;
window.ready = true;
</script>"""

# Installs one after another in this page, each with its own IndexedDB database (one install
# per name): create the client on the collector, report the value, send at the clock's next
# bucket, close. Answers the outcomes and what the flushes counted.
_INSTALLS = """async ([url, name, config, values, now, prefix]) => {
  const outcomes = {};
  const sent = {accepted: 0, duplicate: 0, rejected: 0, pending: 0};
  for (let i = 0; i < values.length; i++) {
    let at = now;
    const store = await chorus.IndexedDBStore.open({name: prefix + i});
    const client = await chorus.Client.create({url, store, campaigns: {[name]: config},
                                               clock: () => at});
    const outcome = await client.report(name, values[i]);
    outcomes[outcome] = (outcomes[outcome] || 0) + 1;
    at = now + 2 * config.time_precision;  // past the random delay after its bucket
    const flushed = await client.flush();
    for (const key of Object.keys(sent)) sent[key] += flushed[key];
    await client.close();
  }
  return {outcomes, sent};
}"""

SHARES = {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}
INSTALLS = 400


def _open(ts_context: BrowserContext, ts_site: str, allowed: tuple[str, ...]) -> Page:
    """A page of the app's site that fails the test on a script error or on a request to
    anywhere but the site itself and ``allowed``."""
    page = ts_context.new_page()
    strays: list[str] = []
    page.on("pageerror", lambda error: strays.append(f"script error: {error}"))
    page.on("request", lambda r: None if r.url.startswith((ts_site, *allowed))
            else strays.append(r.url))
    page.goto(ts_site + "/index.html")
    page.wait_for_function("window.ready === true")
    page.strays = strays  # type: ignore[attr-defined]
    return page


def _values(count: int) -> list[str]:
    """Exact shares: ``count`` values in the proportions of SHARES."""
    values = [v for v, share in SHARES.items() for _ in range(round(share * count))]
    assert len(values) == count
    return values


def test_installs_in_the_browser_report_and_the_estimates_come_out_right(
        live_collector: LiveCollector, ts_context: BrowserContext, ts_site: str) -> None:
    status, config = live_collector.request(
        "POST", "/v1/campaigns", token=live_collector.admin_token,
        body=campaign_spec("survey", domain=list(SHARES), epsilon=2.0))
    assert status == 201, config
    page = _open(ts_context, ts_site, (live_collector.url,))
    result = page.evaluate(_INSTALLS, [live_collector.url, "survey", config,
                                       _values(INSTALLS), NOW, "install-"])
    assert result == {"outcomes": {"queued": INSTALLS},
                      "sent": {"accepted": INSTALLS, "duplicate": 0, "rejected": 0,
                               "pending": 0}}, result
    assert page.strays == []  # type: ignore[attr-defined]
    live_collector.fold()
    estimates = live_collector.get_json("/v1/campaigns/survey/estimates", token=ANALYST)
    assert estimates["n"] == INSTALLS
    rows = {row["value"]: row for row in estimates["rows"]}
    # Four estimates at once: 4.5 standard errors each keeps a false alarm below 3e-5.
    for value, share in SHARES.items():
        row = rows[value]
        assert abs(row["frequency"] - share) < 4.5 * row["frequency_std_error"], (value, row)


def test_a_reload_keeps_the_ledger_and_the_outbox(live_collector: LiveCollector,
                                                  ts_context: BrowserContext, ts_site: str) -> None:
    status, config = live_collector.request(
        "POST", "/v1/campaigns", token=live_collector.admin_token,
        body=campaign_spec("once", domain=["a", "b"], mechanism="rr", epsilon=1.0,
                           privacy={"unit": "lifetime", "budget": 1.0, "max_reports": 1}))
    assert status == 201, config
    page = _open(ts_context, ts_site, (live_collector.url,))
    make = """async ([url, config, now]) => {
      const store = await chorus.IndexedDBStore.open({name: "reloaded"});
      const client = await chorus.Client.create({url, store, campaigns: {once: config},
                                                 clock: () => now});
      const outcome = await client.report("once", "a");
      const pending = await client.pending();
      const spent = await client.spent("once");
      await client.close();
      return {outcome, pending, spent};
    }"""
    first = page.evaluate(make, [live_collector.url, config, NOW])
    assert first == {"outcome": "queued", "pending": 1, "spent": 1.0}
    page.reload()
    page.wait_for_function("window.ready === true")
    # The same install after the reload: its one report is charged and waiting; another is
    # refused, not charged again.
    again = page.evaluate(make, [live_collector.url, config, NOW])
    assert again["pending"] == 1 and again["spent"] == 1.0, again
    assert again["outcome"] != "queued"


class _Hostile(BaseHTTPRequestHandler):
    """A collector that serves what it likes and sets a cookie, allowing credentials; it
    records every request's Cookie header."""

    config: ClassVar[dict[str, Any]] = {}
    cookies: ClassVar[list[str | None]] = []

    def _cors(self) -> None:
        origin = self.headers.get("Origin") or "*"
        self.send_header("Access-Control-Allow-Origin", origin)
        self.send_header("Access-Control-Allow-Credentials", "true")
        self.send_header("Access-Control-Allow-Headers", "Content-Type, Authorization")
        self.send_header("Access-Control-Allow-Methods", "GET, POST")
        self.send_header("Set-Cookie", "tracker=install-42; Path=/; SameSite=None")

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self._cors()
        self.end_headers()

    def do_GET(self) -> None:
        type(self).cookies.append(self.headers.get("Cookie"))
        body = json.dumps(type(self).config).encode()
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        type(self).cookies.append(self.headers.get("Cookie"))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"status": "accepted"}'
        self.send_response(201)
        self._cors()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    _Hostile.cookies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_a_hostile_collector_gets_no_cookie_and_no_config_of_its_own(
        live_collector: LiveCollector, hostile: str, ts_context: BrowserContext,
        ts_site: str) -> None:
    status, config = live_collector.request("POST", "/v1/campaigns",
                                            token=live_collector.admin_token,
                                            body=campaign_spec("survey", domain=list(SHARES)))
    assert status == 201
    # The hostile collector serves the campaign with a larger ε under another digest.
    inflated = {**config, "epsilon": config["epsilon"] * 4}
    _Hostile.config = inflated
    page = _open(ts_context, ts_site, (hostile,))
    outcome = page.evaluate("""async ([url, config, now]) => {
      let at = now;
      const store = await chorus.IndexedDBStore.open({name: "hostile"});
      // Pinned by digest: the served config must hash to it.
      const client = await chorus.Client.create({url, store, campaigns: {survey: config.digest},
                                                 clock: () => at});
      const first = await client.report("survey", "a");
      // Shipped with the app: the served one is never needed, and a report is made.
      const shipped = await chorus.Client.create({url, store: new chorus.MemoryStore(),
                                                  campaigns: {survey: config},
                                                  clock: () => at});
      const second = await shipped.report("survey", "a");
      at = now + 2 * config.time_precision;
      await shipped.flush();
      await shipped.flush();
      await client.close();
      await shipped.close();
      return {first, second};
    }""", [hostile, config, NOW])
    assert outcome == {"first": "unavailable", "second": "queued"}, outcome
    assert page.strays == []  # type: ignore[attr-defined]
    # It set a cookie on every answer; the client sent none back.
    assert _Hostile.cookies and all(c is None for c in _Hostile.cookies), _Hostile.cookies
