"""``chorus demo``: the whole system on the embedded default, in about a minute.

Starts a collector (the production server, on loopback, on a SQLite file it keeps in
``.demo/``), creates seven campaigns (one discovers frequent search terms without a candidate
list, one is a daily series over 90 days), simulates installs that report over real HTTP
(the first hundred through the client library itself, the rest made by the same mechanisms
with the same OS CSPRNG and sent many to a request: ``demo_reports``), then prints the true
value, the estimate and its 95% interval side by side, the dashboard's address and this
demo's tokens, and stops the server; with ``serve``, it goes on serving on loopback until
Ctrl-C. A later run with the same users and seed serves the kept database at once
(``demo_store``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import math
import random
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from chorus_client import Client, CollectorAPI, RequestsTransport
from chorus_collector.cli.demo_reports import install_report, send_reports
from chorus_collector.cli.demo_series import (
    SERIES_NAME,
    SERIES_USERS,
    SeriesPopulation,
    series_plans,
    series_reports,
    series_spec,
    simulate_series,
    summarize_series,
)
from chorus_collector.cli.demo_store import DEFAULT_FOLDER, DemoFolder, DemoRecord
from chorus_collector.cli.formatting import format_estimates
from chorus_collector.cli.progress import progress_bar
from chorus_collector.results.distribution import quantile_label
from chorus_collector.results.tables import shown_value
from chorus_collector.server.process import CollectorProcess
from chorus_collector.storage import open_storage
from chorus_collector.version import VERSION
from chorus_shared.campaign import Campaign, campaign_from_config, canonical_json

__all__ = ["CLIENT_INSTALLS", "DEMO_CAMPAIGNS", "Population", "fingerprint", "run_demo"]

BROWSERS = ["chrome", "safari", "edge", "firefox", "samsung", "opera", "uc", "brave",
            "vivaldi", "other"]
BROWSER_SHARES = [0.42, 0.20, 0.11, 0.08, 0.06, 0.045, 0.035, 0.025, 0.015, 0.01]
HOMEPAGES = [f"https://site-{i:03d}.example/" for i in range(100)]
DAY = 86400
# Each simulated user reports on one of the last DEMO_DAYS UTC days (today included), so the
# dashboard has a series to draw; the estimates over all data are of the whole population.
DEMO_DAYS = 7
#: Installs of each app that report through the client library itself (its state, ledger and
#: a request per report); the rest are made by its mechanisms directly (``demo_reports``).
CLIENT_INSTALLS = 100
#: The most seconds the demo waits for the server's fold before it queries anyway.
FOLD_WAIT = 120
#: Bumped when what the demo simulates changes without its campaigns changing: a kept
#: database of another format is simulated afresh.
DEMO_FORMAT = 1

DEMO_CAMPAIGNS: list[dict[str, Any]] = [
    {"name": "browser", "mechanism": "krr", "epsilon": 1.0,
     "domain": {"kind": "categories", "values": BROWSERS, "other": "other"},
     "min_batch_size": 100, "time_precision": DAY,
     "description": "Which browser do you use? (k-RR, 10 categories)"},
    {"name": "homepage", "mechanism": "rappor", "epsilon": 1.0,
     "domain": {"kind": "strings"}, "params": {"k": 128, "h": 2, "m": 32},
     "min_batch_size": 100, "time_precision": DAY,
     "description": "Homepage URL (Bloom-filter RAPPOR)"},
    {"name": "load_time", "mechanism": "duchi", "epsilon": 1.0,
     "domain": {"kind": "numeric", "lo": 0.0, "hi": 10.0}, "min_batch_size": 100,
     "time_precision": DAY,
     "description": "Page load time in seconds, clipped to [0, 10] (Duchi et al.)"},
    {"name": "load_time_percentiles", "mechanism": "hh", "epsilon": 1.0,
     "domain": {"kind": "numeric", "lo": 0.1, "hi": 20.0},
     "params": {"branching": 4, "buckets": 64, "scale": "log"},
     "min_batch_size": 100, "time_precision": DAY,
     "description": "Page load time in seconds, as a distribution: p50, p95, p99 "
                    "(hierarchical histogram, 64 buckets on a log scale)"},
]
#: A record campaign: crashes depend on the app version, not on the OS.
OSES = ["windows", "mac", "linux", "android"]
OS_SHARES = [0.45, 0.2, 0.1, 0.25]
VERSIONS = ["3.1", "3.2", "4.0"]
VERSION_SHARES = [0.3, 0.5, 0.2]
CRASH_RATES = {"3.1": 0.04, "3.2": 0.04, "4.0": 0.2}
DEMO_CAMPAIGNS.append(
    {"name": "sessions", "mechanism": "marginals", "epsilon": 2.0,
     "domain": {"kind": "record", "attributes": [
         {"name": "os", "values": OSES}, {"name": "version", "values": VERSIONS},
         {"name": "crashed", "values": ["no", "yes"]}]},
     "min_batch_size": 100, "time_precision": DAY,
     "description": "A session's OS, app version and whether it crashed, as one record: "
                    "joints, P(crashed | version) and independence tests (marginals)"})
#: A discovery campaign: search terms of up to 8 lowercase letters, found without a
#: candidate list. Eight popular terms hold 68% of the searches; the rest are spread over
#: 2,000 rarer made-up words. At ε = 2 (the client's default cap) 20,000 users are enough for
#: the terms above ~7%: the walk splits the installs into 8 groups, so discovery needs more
#: reports than estimating a known list does. The declared alphabet makes the walk test 27
#: continuations of each prefix rather than 256 bytes, and it can only end on [a-z] words.
SEARCH_TERMS = ["weather", "news", "maps", "music", "recipes", "football", "flights",
                "bitcoin"]
SEARCH_SHARES = [0.22, 0.15, 0.10, 0.07, 0.05, 0.04, 0.03, 0.02]
SEARCH_TAIL = 2_000
SEARCH_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
DEMO_CAMPAIGNS.append(
    {"name": "search", "mechanism": "auto", "epsilon": 2.0,
     "domain": {"kind": "strings", "max_bytes": 8, "alphabet": SEARCH_ALPHABET},
     "params": {"top": 8}, "min_batch_size": 100, "time_precision": DAY,
     "description": "What did you search for? Up to 8 lowercase letters, discovered without "
                    "a candidate list (auto: PEM or TreeHist)"})
#: How the app shares the default lifetime budget of 8 between the campaigns above, as an app
#: states it in code (``Client(plan=...)``): one report to each.
DEMO_PLAN = {"browser": 1.0, "homepage": 1.0, "load_time": 1.0, "load_time_percentiles": 1.0,
             "sessions": 2.0, "search": 2.0}
#: The quantiles the demo prints beside the truth.
DEMO_QUANTILES = (0.5, 0.95, 0.99)


class Population:
    """A synthetic population with known true values (seeded; the noise is not)."""

    def __init__(self, users: int, seed: int) -> None:
        rng = random.Random(seed)
        self.series = SeriesPopulation.draw(min(users, SERIES_USERS), seed + 1)
        zipf = [1 / (rank + 1) ** 1.1 for rank in range(len(HOMEPAGES))]
        self.browsers = rng.choices(BROWSERS, BROWSER_SHARES, k=users)
        self.homepages = rng.choices(HOMEPAGES, zipf, k=users)
        self.load_times = [rng.lognormvariate(math.log(2.0), 0.6) for _ in range(users)]
        versions = rng.choices(VERSIONS, VERSION_SHARES, k=users)
        self.sessions = [
            {"os": os, "version": version,
             "crashed": "yes" if rng.random() < CRASH_RATES[version] else "no"}
            for os, version in zip(rng.choices(OSES, OS_SHARES, k=users), versions,
                                   strict=True)]
        tail = ["".join(rng.choices(SEARCH_ALPHABET, k=rng.randint(3, 8)))
                for _ in range(SEARCH_TAIL)]
        rest = (1 - sum(SEARCH_SHARES)) / SEARCH_TAIL
        self.searches = rng.choices(SEARCH_TERMS + tail, SEARCH_SHARES + [rest] * SEARCH_TAIL,
                                    k=users)

    def __len__(self) -> int:
        return len(self.browsers)

    def values(self, install: int) -> tuple[object, ...]:
        """The install's true values, in the order of DEMO_CAMPAIGNS."""
        return (self.browsers[install], self.homepages[install], self.load_times[install],
                self.load_times[install], self.sessions[install], self.searches[install])

    def truth(self) -> dict[str, dict[str, float]]:
        n = len(self)
        clipped = [min(max(t, 0.0), 10.0) for t in self.load_times]
        return {
            "browser": {k: v / n for k, v in Counter(self.browsers).items()},
            "homepage": {k: v / n for k, v in Counter(self.homepages).items()},
            "load_time": {"mean": sum(clipped) / n},
            "load_time_percentiles": _quantiles(
                [min(max(t, 0.1), 20.0) for t in self.load_times], DEMO_QUANTILES),
            "search": {k: v / n for k, v in Counter(self.searches).items()},
            "sessions": {**{f"{attribute}={value}": count / n for (attribute, value), count
                            in Counter(item for session in self.sessions
                                       for item in session.items()).items()},
                         **self._crash_rates()},
        }

    def _crash_rates(self) -> dict[str, float]:
        """P(crashed = yes | version) in the population, keyed as the demo prints it."""
        out = {}
        for version in VERSIONS:
            crashed = [s["crashed"] == "yes" for s in self.sessions if s["version"] == version]
            out[f"crashed=yes|version={version}"] = sum(crashed) / max(1, len(crashed))
        return out


def _quantiles(values: list[float], levels: tuple[float, ...]) -> dict[str, float]:
    """The empirical quantiles (the smallest value with at least a share q at or below it)."""
    ordered = sorted(values)
    return {quantile_label(q): ordered[max(0, math.ceil(q * len(ordered)) - 1)]
            for q in levels}


def _simulate(url: str, campaigns: dict[str, Campaign], population: Population,
              echo: Callable[[str], None], workers: int = 8) -> int:
    """Every install's reports, the first :data:`CLIENT_INSTALLS` of each app through the
    real client library as an app sends them, the rest made as the client makes them and
    sent many to a request (``demo_reports``); returns how many were accepted."""
    now = time.time()
    through_client = range(min(CLIENT_INSTALLS, len(population)))
    echo(f"simulating {len(population):,} installs of an app with six campaigns: "
         f"{len(through_client)} through the client library over HTTP, a request per "
         "report; the rest with the same mechanisms and OS CSPRNG, many to a request")
    accepted = _through_client(url, campaigns, population, through_client, now, workers)
    echo(f"  through the client library: {accepted:,} reports accepted")
    rest = range(len(through_client), len(population))
    names = [spec["name"] for spec in DEMO_CAMPAIGNS]
    reports = (install_report(campaigns[name], value, _reported_at(now, i))
               for i in rest for name, value in zip(names, population.values(i), strict=True))
    accepted += send_reports(url, reports, len(rest) * len(names), "installs", echo)
    # The daily series: another app's installs, its one campaign planned over 90 days.
    series = campaigns.get(SERIES_NAME)
    if series is not None:
        installs = len(population.series.before)
        first = range(min(CLIENT_INSTALLS, installs))
        echo(f"simulating {installs:,} installs of another app, each reporting on 4 days of "
             f"90 drawn at random ({len(first)} through the client library)")
        session = requests.Session()
        session.mount("http://", HTTPAdapter(pool_connections=workers, pool_maxsize=workers))
        with session:
            transport = RequestsTransport(session, reuse_connections=True)
            accepted += simulate_series(url, series, population.series, transport, first,
                                        workers)
        plans = series_plans(series, range(len(first), installs))
        accepted += send_reports(url, series_reports(series, population.series, plans),
                                 sum(map(len, plans.values())), "daily-series installs", echo)
    return accepted


def _reported_at(now: float, install: int) -> float:
    """Each install reports on one of the last DEMO_DAYS days, so the series has days."""
    return now - (install % DEMO_DAYS) * DAY


def _through_client(url: str, campaigns: dict[str, Campaign], population: Population,
                    installs: range, now: float, workers: int) -> int:
    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_connections=workers, pool_maxsize=workers))
    # Simulated devices in one process share a connection pool; a real install reuses no
    # connection (the default).
    transport = RequestsTransport(session, reuse_connections=True)

    def one_user(i: int) -> int:
        # Each user is one app install with the configs pinned, CSPRNG noise, the default
        # caps and the app's plan for its lifetime budget of 8 (docs/client.md). Ephemeral
        # and without a send delay only because the whole simulation lasts a minute (a real
        # app keeps its state on disk and lets reports leave at random times).
        reported_at = _reported_at(now, i)
        client = Client(url, ephemeral=True, transport=transport, campaigns=campaigns,
                        send_delay=0.0, clock=lambda: reported_at, plan=DEMO_PLAN)
        for spec, value in zip(DEMO_CAMPAIGNS, population.values(i), strict=True):
            client.report(spec["name"], value)
        client.flush()
        return client.totals.accepted

    accepted = 0
    with session, ThreadPoolExecutor(workers) as pool, \
            progress_bar(len(installs), "install", "installs through the client") as bar:
        for count in pool.map(one_user, installs, chunksize=16):
            accepted += count
            bar.update(1)
    return accepted


def _wait_for_fold(database: Path, echo: Callable[[str], None]) -> None:
    """Wait (a bounded time) until the server's background fold has folded every report, so
    that the queries read per-bucket statistics rather than map every report again."""
    storage = open_storage(str(database))
    try:
        left = storage.fold_status().unfolded
        if left == 0:
            return
        echo(f"folding {left:,} reports into the per-day statistics ...")
        started = time.monotonic()
        with progress_bar(left, "report", "folding") as bar:
            while left and time.monotonic() - started < FOLD_WAIT:
                time.sleep(0.2)
                now_left = storage.fold_status().unfolded
                bar.update(left - now_left)
                left = now_left
        echo(f"  folded in {time.monotonic() - started:.1f} s" if left == 0 else
             f"  {left:,} reports not folded yet: the estimates map them at query time")
    finally:
        storage.close()


def fingerprint(users: int, seed: int) -> str:
    """What a kept database holds: the demo's campaigns and populations, and this version
    of Chorus (another version may ingest, fold or estimate otherwise)."""
    described = {"format": DEMO_FORMAT, "version": VERSION, "users": users, "seed": seed,
                 "campaigns": DEMO_CAMPAIGNS, "plan": DEMO_PLAN,
                 "series": series_spec(0)}  # its shape: the dates follow the run's day
    return hashlib.sha256(canonical_json(described)).hexdigest()


def run_demo(users: int = 20_000, seed: int = 7, echo: Callable[[str], None] = print, *,
             serve: bool = False, port: int | None = None,
             until_stopped: Callable[[CollectorProcess], None] | None = None,
             folder: Path = DEFAULT_FOLDER, fresh: bool = False) -> dict[str, Any]:
    """Run the demo and print the results, the dashboard's address and the tokens to sign in
    with. The database stays in ``folder``: a later run with the same users and seed uses it
    as it is (unless ``fresh``). With ``serve``, the collector then goes on answering on
    loopback until ``until_stopped`` returns (by default: until Ctrl-C, or until the server
    dies)."""
    started = time.monotonic()
    store = DemoFolder(folder)
    with store.lock():
        record = None if fresh else store.load(fingerprint(users, seed))
        if record is None:
            store.clear()
            admin, analyst = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        else:
            admin, analyst = record.admin_token, record.analyst_token
        settings = {"ADMIN_TOKEN": admin, "ANALYST_TOKEN": analyst, "LOG_LEVEL": "WARNING"}
        with CollectorProcess(store.database, settings=settings, port=port) as server:
            echo(f"collector: {server.url} (gunicorn), database {store.database}")
            if record is None:
                campaigns, accepted = _create_and_simulate(server.url, admin, users, seed, echo)
                _wait_for_fold(store.database, echo)
                store.save(DemoRecord(fingerprint(users, seed), users, seed, time.time(),
                                      accepted, admin, analyst))
            else:
                campaigns = _campaigns(server.url, admin)
                accepted = record.reports
                simulated = dt.datetime.fromtimestamp(record.simulated_at, dt.UTC)
                echo(f"using the database kept from {simulated:%Y-%m-%d %H:%M} UTC: "
                     f"{users:,} installs, {accepted:,} reports (`chorus demo --fresh` "
                     "simulates again)")
            echo("querying the estimates ...")
            population = Population(users, seed)
            results, series = _query(server.url, analyst, campaigns, population, echo)
            truth = population.truth()
            covered, total = _print_results(results, truth, echo)
            days_covered, days = series()
            echo(f"\n{covered} of {total} true values lie inside their 95% interval "
                 f"({100 * covered / total:.1f}%), and {days_covered} of {days} days of the "
                 f"series; finished in {time.monotonic() - started:.0f} s")
            echo("")
            lasts = ("serving on loopback until Ctrl-C" if serve else
                     "it stops with this demo: `chorus demo --serve`, or `make serve-demo`, "
                     "serves this database again until Ctrl-C, without simulating it again")
            # Ctrl-C is a clean stop from the moment the address is shown: whoever reads
            # it may press Ctrl-C at once, before this process reaches its serving loop.
            with _stopped_by_signals() if serve else contextlib.nullcontext() as stop:
                echo(f"dashboard: {server.url}/ ({lasts})")
                echo(f"  sign in with the analyst token {analyst}")
                echo(f"  or the admin token {admin} (both kept with the database in "
                     f"{store.path})")
                if stop is not None:
                    if until_stopped is not None:
                        until_stopped(server)
                    else:
                        _serve_until(server, stop)
                    echo("stopping the collector")
    return {"results": results, "truth": truth, "covered": covered, "total": total,
            "accepted": accepted, "series_days": days, "series_covered": days_covered,
            "reused": record is not None}


def _create_and_simulate(url: str, admin: str, users: int, seed: int,
                         echo: Callable[[str], None]) -> tuple[dict[str, Campaign], int]:
    """Create the campaigns and simulate the installs; (the campaigns, reports accepted)."""
    api = CollectorAPI(url, admin)
    campaigns: dict[str, Campaign] = {}
    for spec in [*DEMO_CAMPAIGNS, series_spec(time.time())]:
        config = api.create_campaign(spec)
        campaigns[spec["name"]] = campaign_from_config(config)
        chosen = config["mechanism"] + (" (auto)" if spec["mechanism"] == "auto" else "")
        echo(f"campaign {spec['name']}: {chosen}, ε = {config['epsilon']:.3g}"
             f", digest {config['digest'][:12]}")
    t0 = time.monotonic()
    accepted = _simulate(url, campaigns, Population(users, seed), echo)
    echo(f"{accepted:,} reports accepted in {time.monotonic() - t0:.1f} s")
    return campaigns, accepted


def _campaigns(url: str, admin: str) -> dict[str, Campaign]:
    """The kept database's campaigns, as its collector serves them."""
    api = CollectorAPI(url, admin)
    names = [spec["name"] for spec in DEMO_CAMPAIGNS] + [SERIES_NAME]
    return {name: campaign_from_config(api.get_campaign(name)) for name in names}


def _query(url: str, analyst: str, campaigns: dict[str, Campaign], population: Population,
           echo: Callable[[str], None],
           ) -> tuple[dict[str, Any], Callable[[], tuple[int, int]]]:
    """The estimates of each campaign, and the series' summary to print after them."""
    analyst_api = CollectorAPI(url, analyst)
    results = {
        "browser": analyst_api.estimates("browser"),
        "homepage": analyst_api.estimates("homepage", candidates=HOMEPAGES),
        "load_time": analyst_api.estimates("load_time"),
        "load_time_percentiles": analyst_api.estimates("load_time_percentiles",
                                                       quantiles=DEMO_QUANTILES),
        "sessions": analyst_api.estimates("sessions", joints=[("version", "crashed")]),
        "search": analyst_api.estimates("search"),  # no candidates: what the walk found
    }

    def series() -> tuple[int, int]:
        return summarize_series(analyst_api, campaigns[SERIES_NAME], population.series, echo)

    return results, series


def _print_results(results: dict[str, Any], truth: dict[str, dict[str, float]],
                   echo: Callable[[str], None]) -> tuple[int, int]:
    """Each table beside the truth; returns how many true values the intervals cover, of
    how many."""
    covered = total = 0
    for name, result in results.items():
        echo("")
        if name == "homepage":  # the 15 most common, of 100 candidates
            top = sorted(result["rows"], key=lambda r: -truth[name].get(r["value"], 0))[:15]
            shown = {**result, "rows": top}
            echo(format_estimates(shown, truth[name]))
            echo(f"  … and {len(result['rows']) - 15} more candidates")
        elif "discovery" in result.get("extra", {}):
            echo(format_estimates(result, truth[name]))
            echo(_found_line(result, truth[name]))
        elif result["kind"] == "distribution":
            echo(format_estimates(result))
            for row in result["quantiles"]:
                label = quantile_label(row["q"])
                true = truth[name][label]
                if row["ci_low"] is None:  # an sw campaign states no interval
                    echo(f"  true {label} {true:.4g}: estimated {row['value']:.4g}")
                    continue
                echo(f"  true {label} {true:.4g}: estimated {row['value']:.4g} "
                     f"[{row['ci_low']:.4g}, {row['ci_high']:.4g}]")
                total += 1
                covered += row["ci_low"] <= true <= row["ci_high"]
            continue
        elif result["kind"] == "record":
            # The truth of a record campaign, if given, maps attribute=value to its share;
            # the marginals' intervals are counted (the joints are in the table).
            shares = truth.get(name)
            echo(format_estimates(result, shares))
            if shares is None:
                continue
            for marginal in result["marginals"]:
                for row in marginal["rows"]:
                    label = f"{marginal['attribute']}={row['value']}"
                    total += 1
                    covered += row["ci_low"] <= shares.get(label, 0.0) <= row["ci_high"]
            # Conditional shares, where the truth states them ("crashed=yes|version=4.0").
            for joint in result["joints"]:
                for conditional in joint["conditionals"]:
                    for cell in conditional["cells"]:
                        label = (f"{conditional['of']}={cell['value']}|{conditional['given']}"
                                 f"={cell['given_value']}")
                        if label in shares and cell["ci_low"] is not None:
                            echo(f"  true P({label}) {shares[label]:.4f}: estimated "
                                 f"{cell['frequency']:.4f} [{cell['ci_low']:.4f}, "
                                 f"{cell['ci_high']:.4f}]")
                            total += 1
                            covered += cell["ci_low"] <= shares[label] <= cell["ci_high"]
            continue
        else:
            echo(format_estimates(result, truth[name]))
        rows = result.get("rows") or [{**result, "value": "mean",
                                       "frequency_ci_low": result["ci_low"],
                                       "frequency_ci_high": result["ci_high"]}]
        for row in rows:
            true = truth[name].get(row["value"], 0.0)
            total += 1
            covered += row["frequency_ci_low"] <= true <= row["frequency_ci_high"]
    return covered, total


def _found_line(result: dict[str, Any], truth: dict[str, float], shown: int = 8) -> str:
    """The truly most frequent values, each said found (and detected) or missed."""
    rows = {row["value"]: row for row in result["rows"]}
    parts = []
    for value, share in sorted(truth.items(), key=lambda item: -item[1])[:shown]:
        row = rows.get(value)
        said = ("missed" if row is None else "found, detected" if row["detected"]
                else "found, not detected")
        parts.append(f"{shown_value(value)} {share:.3f} ({said})")
    return f"  the {len(parts)} most frequent in truth: " + "; ".join(parts)


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[threading.Event]:
    """An event that Ctrl-C (SIGINT) or SIGTERM sets while inside (the previous handlers
    again after)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    # The server runs in its own session: a terminal's Ctrl-C reaches this process only,
    # which then stops the server with SIGTERM (a graceful shutdown) as it leaves.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve_until(server: CollectorProcess, stop: threading.Event) -> None:
    """Return once ``stop`` is set; fail if the server dies first."""
    while not stop.wait(0.5):
        if server.process is None or server.process.poll() is not None:
            raise RuntimeError(f"the collector exited unexpectedly:\n{server.log()}")
