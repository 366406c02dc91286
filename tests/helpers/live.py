"""A collector served over real HTTP on loopback, in a thread, and campaigns seeded with
simulated reports over several time buckets: what the browser tests (tests/browser) and the
dashboard's screenshots (docs/screenshots/take.py) look at.

The server is werkzeug's threaded development server, not gunicorn: it runs in the test's own
process, so a test can move the app's clock, fold on demand and read the storage directly,
and a browser's parallel requests (page, scripts, styles, data) are answered at once.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server

from chorus_collector.app import start_background_work
from chorus_collector.design.simulate import simulate
from chorus_collector.jobs.folding import BackgroundFolder
from chorus_shared import campaign_from_config, new_report_id
from helpers.support import ADMIN, ANALYST, FakeClock

__all__ = ["DAY", "LiveCollector", "SeededCampaign", "seed_campaign", "seed_campaigns",
           "seed_distribution", "seed_record", "serving"]

DAY = 86_400
# Reports per POST: well under MAX_REPORTS_PER_REQUEST (10,000) and MAX_BODY_BYTES (4 MiB).
_BATCH = 2_000


@dataclass
class LiveCollector:
    """A collector app answering on ``url`` (``http://127.0.0.1:PORT``) until stopped."""

    app: Flask
    url: str
    clock: FakeClock
    admin_token: str = ADMIN
    analyst_token: str = ANALYST

    @property
    def origin(self) -> str:
        """What a browser's request to this collector starts with (scheme, host and port)."""
        return self.url

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the one host a dashboard page may request anything from."""
        return self.url.removeprefix("http://")

    def request(self, method: str, path: str, *, token: str | None = None,
                body: Any = None) -> tuple[int, Any]:
        """One HTTP request to the server (not the test client): (status, decoded JSON or
        text)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, _decode(reply.read(), reply.headers.get_content_type())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, _decode(error.read(), error.headers.get_content_type())

    def get_json(self, path: str, *, token: str | None = None) -> Any:
        status, body = self.request("GET", path, token=token or self.analyst_token)
        assert status == 200, (path, status, body)
        return body

    def fold(self) -> int:
        """Fold every pending report now (the background folder would within FOLD_INTERVAL
        seconds; estimates are complete either way); returns how many were folded."""
        folder: BackgroundFolder = self.app.extensions["chorus.folder"]
        return folder.run_once()


def _decode(body: bytes, content_type: str) -> Any:
    if content_type.endswith("json"):
        return json.loads(body)
    return body.decode()


class _QuietHandler(WSGIRequestHandler):
    """No line per request on stderr: the app logs its requests itself (chorus.collector)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@contextmanager
def serving(app: Flask, clock: FakeClock) -> Iterator[LiveCollector]:
    """Serve ``app`` on 127.0.0.1 (a free port) in a thread, with its background folder
    running; shut both down on exit."""
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="live-collector", daemon=True)
    thread.start()
    start_background_work(app)
    try:
        yield LiveCollector(app=app, url=f"http://127.0.0.1:{server.server_port}", clock=clock)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        folder: BackgroundFolder = app.extensions["chorus.folder"]
        folder.stop()


@dataclass
class SeededCampaign:
    """A campaign with simulated reports: its public config, the start of each time bucket
    that holds reports and each bucket's true distribution (category → share) or true mean."""

    name: str
    config: dict[str, Any]
    buckets: list[int]
    truth: list[dict[str, float]] = field(default_factory=list)
    accepted: int = 0


Draw = Callable[[int, np.random.Generator], Sequence[Any]]


def seed_campaign(live: LiveCollector, spec: Mapping[str, Any],
                  draws: Sequence[Draw], users_per_bucket: int,
                  rng: np.random.Generator) -> SeededCampaign:
    """Create ``spec`` and, for bucket i of ``len(draws)`` consecutive time buckets ending
    with the clock's, post ``users_per_bucket`` reports of the values ``draws[i](n, rng)``,
    perturbed by the vectorized simulator (one report per user per bucket) and sent over
    HTTP in the wire format, in batches."""
    status, config = live.request("POST", "/v1/campaigns", token=live.admin_token,
                                  body=dict(spec))
    assert status == 201, config
    campaign = campaign_from_config(config)
    mechanism = campaign.mechanism
    latest = campaign.time_bucket(live.clock())
    seeded = SeededCampaign(name=campaign.name, config=config, buckets=[])
    for i, draw in enumerate(draws):
        bucket = latest - (len(draws) - 1 - i) * campaign.time_precision
        values = list(draw(users_per_bucket, rng))
        seeded.buckets.append(bucket)
        seeded.truth.append(_truth(values))
        payloads = simulate(mechanism, [mechanism.encode(v) for v in values], rng)
        reports = [{"report_id": new_report_id(), "digest": campaign.digest, "time": bucket,
                    "payload": p} for p in payloads]
        for start in range(0, len(reports), _BATCH):
            status, answer = live.request(
                "POST", f"/v1/campaigns/{campaign.name}/reports",
                body={"reports": reports[start:start + _BATCH]})
            assert status == 200 and answer["rejected"] == 0, (status, answer)
            seeded.accepted += answer["accepted"]
    return seeded


def _truth(values: Sequence[Any]) -> dict[str, float]:
    if values and all(isinstance(v, float) for v in values):
        return {"mean": math.fsum(values) / len(values)}
    if values and all(isinstance(v, dict) for v in values):
        # A record: each attribute's marginal (browser=chrome) and each pair's cells
        # (browser=chrome|os=linux), as the series and the CSV name them.
        shares: Counter[str] = Counter()
        for value in values:
            labels = [f"{name}={category}" for name, category in value.items()]
            shares.update(labels)
            shares.update(f"{a}|{b}" for i, a in enumerate(labels) for b in labels[i + 1:])
        return {label: count / len(values) for label, count in shares.items()}
    return {str(value): count / len(values) for value, count in Counter(values).items()}


def categorical(values: Sequence[str], shares: Sequence[float]) -> Draw:
    """Draw ``n`` values from ``values`` with probabilities ``shares``."""
    return lambda n, rng: [values[i] for i in rng.choice(len(values), size=n, p=shares)]


def lognormal(median: float, sigma: float, lo: float, hi: float) -> Draw:
    """Draw ``n`` positive numbers (a load time), clipped to [lo, hi] as the device does."""
    return lambda n, rng: np.clip(rng.lognormal(math.log(median), sigma, n), lo, hi).tolist()


BROWSERS = ["chrome", "safari", "edge", "firefox", "other"]
BROWSER_SHARES = [0.45, 0.25, 0.12, 0.10, 0.08]
# After the change: safari gains 10 points from chrome (a planted change between windows).
BROWSER_SHARES_AFTER = [0.35, 0.35, 0.12, 0.10, 0.08]
HOMEPAGES = [f"https://site-{i:02d}.example/" for i in range(20)]
HOMEPAGE_SHARES = [w / sum(1 / (r + 1) for r in range(20)) for w in
                   (1 / (r + 1) for r in range(20))]

SEED_SPECS: dict[str, dict[str, Any]] = {
    "browser": {"name": "browser", "mechanism": "krr", "epsilon": 2.0,
                "domain": {"kind": "categories", "values": BROWSERS, "other": "other"},
                "time_precision": DAY, "min_batch_size": 100,
                "description": "Which browser do you use? (k-RR, 5 categories)"},
    "load_time": {"name": "load_time", "mechanism": "duchi", "epsilon": 1.0,
                  "domain": {"kind": "numeric", "lo": 0.0, "hi": 10.0},
                  "time_precision": DAY, "min_batch_size": 100,
                  "description": "Page load time in seconds, clipped to [0, 10]"},
    "homepage": {"name": "homepage", "mechanism": "rappor", "epsilon": 2.0,
                 "domain": {"kind": "strings"}, "params": {"k": 64, "h": 2, "m": 16},
                 "time_precision": DAY, "min_batch_size": 100,
                 "description": "Homepage URL (Bloom-filter RAPPOR)"},
}


def seed_campaigns(live: LiveCollector, *, days: int = 8, users_per_day: int = 2_000,
                   change_day: int | None = None, seed: int = 20261130,
                   ) -> dict[str, SeededCampaign]:
    """The three kinds of campaign a dashboard shows, each with ``days`` daily buckets
    ending with the clock's day: ``browser`` (k-RR over 5 categories; from ``change_day``
    on, if given, safari has gained 10 points from chrome), ``load_time`` (a mean, Duchi et
    al.) and ``homepage`` (RAPPOR over 20 URLs, Zipf-distributed)."""
    rng = np.random.default_rng(seed)
    before = categorical(BROWSERS, BROWSER_SHARES)
    after = categorical(BROWSERS, BROWSER_SHARES_AFTER)
    browser_draws = [after if change_day is not None and day >= change_day else before
                     for day in range(days)]
    return {
        "browser": seed_campaign(live, SEED_SPECS["browser"], browser_draws, users_per_day,
                                 rng),
        "load_time": seed_campaign(live, SEED_SPECS["load_time"],
                                   [lognormal(2.0, 0.6, 0.0, 10.0)] * days, users_per_day,
                                   rng),
        "homepage": seed_campaign(live, SEED_SPECS["homepage"],
                                  [categorical(HOMEPAGES, HOMEPAGE_SHARES)] * days,
                                  users_per_day, rng),
    }


DISTRIBUTION_SPEC: dict[str, Any] = {
    "name": "load_time_percentiles", "mechanism": "hh", "epsilon": 1.0,
    "domain": {"kind": "numeric", "lo": 0.1, "hi": 20.0},
    "params": {"branching": 4, "buckets": 64, "scale": "log"},
    "time_precision": DAY, "min_batch_size": 100,
    "description": "Page load time in seconds, as a distribution (hierarchical histogram, "
                   "64 buckets on a log scale)"}


def seed_distribution(live: LiveCollector, *, days: int = 3, users_per_day: int = 8_000,
                      seed: int = 20261201) -> SeededCampaign:
    """A distribution campaign (``hh`` over load times, log scale) with ``days`` daily
    buckets ending with the clock's day, log-normal load times with a median of 2 s."""
    rng = np.random.default_rng(seed)
    return seed_campaign(live, DISTRIBUTION_SPEC, [lognormal(2.0, 0.6, 0.1, 20.0)] * days,
                         users_per_day, rng)


RECORD_SPEC: dict[str, Any] = {
    "name": "crashes", "mechanism": "marginals", "epsilon": 2.0,
    "domain": {"kind": "record", "attributes": [
        {"name": "browser", "values": ["chrome", "firefox", "safari"]},
        {"name": "os", "values": ["linux", "mac", "windows", "android"]},
        {"name": "crashed", "values": ["no", "yes"]}]},
    "time_precision": DAY, "min_batch_size": 100,
    "description": "Browser, OS and whether the app crashed today (all pairs of attributes "
                   "collected as 2-way marginals)"}
RECORD_BROWSER_SHARES = [0.6, 0.3, 0.1]
RECORD_OS_SHARES = [0.1, 0.3, 0.4, 0.2]
#: P(crashed = yes | browser): safari crashes three times as often (a planted dependence).
RECORD_CRASH_RATES = [0.1, 0.1, 0.3]


def record_draw(n: int, rng: np.random.Generator) -> list[dict[str, str]]:
    """``n`` records of RECORD_SPEC: browser and OS independent, crashes depending on the
    browser."""
    attributes = RECORD_SPEC["domain"]["attributes"]
    browsers = rng.choice(3, size=n, p=RECORD_BROWSER_SHARES)
    systems = rng.choice(4, size=n, p=RECORD_OS_SHARES)
    crashed = rng.random(n) < np.asarray(RECORD_CRASH_RATES)[browsers]
    return [{"browser": attributes[0]["values"][b], "os": attributes[1]["values"][o],
             "crashed": attributes[2]["values"][int(c)]}
            for b, o, c in zip(browsers, systems, crashed, strict=True)]


def seed_record(live: LiveCollector, *, days: int = 3, users_per_day: int = 6_000,
                seed: int = 20261202) -> SeededCampaign:
    """A record campaign (``marginals`` over browser, OS and crashed) with ``days`` daily
    buckets ending with the clock's day; its truth holds each marginal share (os=mac) and
    each pair's cells (browser=safari|crashed=yes)."""
    rng = np.random.default_rng(seed)
    return seed_campaign(live, RECORD_SPEC, [record_draw] * days, users_per_day, rng)
