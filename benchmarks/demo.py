"""The demo and the discovery page: ``python benchmarks/demo.py [--quick]`` (``make bench``).

Issue 33, items 12 and 13. Two ratios, each against a baseline measured in the same run, by
wall clock and by CPU time (this process's and the collector's, which runs in a session of
its own and is read from /proc):

* **Simulating installs**: installs of the demo's app (its six campaigns) through the client
  library, as the demo made all of them before (``Client.report``: an SQLite state and a
  request per report), against as many again made by ``chorus_collector.cli.demo_reports``
  (the same mechanisms and OS CSPRNG, 2,000 reports to a request), on one collector; per
  report.
* **The discovery page**: ``/campaigns/search`` on the data so made, rendered with no walk in
  the cache (the first view of a window in a worker) against the same page again (every walk
  from ``WALKS``).

Writes ``bench-results/demo.json``. About a minute on 2 cores; ``--quick`` about 20 s. Every
loop is bounded by its count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chorus_client import Client, CollectorAPI, RequestsTransport
from chorus_collector.app import create_app
from chorus_collector.cli.demo import DEMO_CAMPAIGNS, DEMO_PLAN, Population
from chorus_collector.cli.demo_reports import install_report, send_reports
from chorus_collector.estimators.discovery import WALKS
from chorus_collector.server.process import CollectorProcess
from chorus_shared.campaign import Campaign, campaign_from_config

ROOT = Path(__file__).resolve().parents[1]

DAY = 86400
TICK = os.sysconf("SC_CLK_TCK")


def session_cpu(session: int) -> float:
    """CPU seconds (user + system) of every live process in a session: the collector."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == session:  # fields after the name: state ppid pgrp session …
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def measured(work: Callable[[], Any], server: CollectorProcess | None = None
             ) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process and the collector)."""
    session = server.process.pid if server is not None and server.process else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    server0 = session_cpu(session) if session else 0.0
    result = work()
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0 + ((session_cpu(session) - server0) if session else 0.0)
    return result, wall, cpu


def through_client(url: str, campaigns: dict[str, Campaign], population: Population,
                   installs: range) -> int:
    """The old demo's way: every install a Client, a request per report."""
    transport = RequestsTransport(reuse_connections=True)
    now = time.time()
    accepted = 0
    for i in installs:
        at = now - (i % 7) * DAY
        client = Client(url, ephemeral=True, transport=transport, campaigns=campaigns,
                        send_delay=0.0, clock=lambda at=at: at, plan=DEMO_PLAN)
        for spec, value in zip(DEMO_CAMPAIGNS, population.values(i), strict=True):
            client.report(spec["name"], value)
        client.flush()
        accepted += client.totals.accepted
        client.close()
    return accepted


def made_in_batches(url: str, campaigns: dict[str, Campaign], population: Population,
                    installs: range) -> int:
    now = time.time()
    reports = (install_report(campaigns[spec["name"]], value, now - (i % 7) * DAY)
               for i in installs
               for spec, value in zip(DEMO_CAMPAIGNS, population.values(i), strict=True))
    return send_reports(url, reports, len(installs) * len(DEMO_CAMPAIGNS), "installs",
                        lambda line: None)


def page_renders(database: Path, analyst: str) -> dict[str, float]:
    app = create_app({"DATABASE": str(database), "ANALYST_TOKEN": analyst,
                      "LOG_LEVEL": "WARNING"})
    client = app.test_client()
    login = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', login)
    assert token is not None
    client.post("/login", data={"token": analyst, "csrf_token": token[1]})

    def render() -> int:
        with client.get("/campaigns/search") as reply:
            assert reply.status_code == 200
            return len(reply.get_data())

    WALKS.clear()
    _, cold_wall, cold_cpu = measured(render)
    walks = WALKS.misses
    _, warm_wall, warm_cpu = measured(render)
    assert WALKS.misses == walks, "the second render walked again"
    return {"walks": walks, "cold_wall_s": cold_wall, "cold_cpu_s": cold_cpu,
            "warm_wall_s": warm_wall, "warm_cpu_s": warm_cpu,
            "wall_ratio": cold_wall / warm_wall, "cpu_ratio": cold_cpu / warm_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "demo.json")
    args = parser.parse_args()
    slow, fast = (50, 1_000) if args.quick else (300, 3_000)
    population = Population(slow + fast, seed=7)
    admin, analyst = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="chorus-bench-demo-") as tmp:
        database = Path(tmp) / "demo.db"
        settings = {"ADMIN_TOKEN": admin, "ANALYST_TOKEN": analyst, "LOG_LEVEL": "WARNING"}
        with CollectorProcess(database, settings=settings) as server:
            api = CollectorAPI(server.url, admin)
            campaigns = {spec["name"]: campaign_from_config(api.create_campaign(spec))
                         for spec in DEMO_CAMPAIGNS}
            old, old_wall, old_cpu = measured(
                lambda: through_client(server.url, campaigns, population, range(slow)), server)
            new, new_wall, new_cpu = measured(
                lambda: made_in_batches(server.url, campaigns, population,
                                        range(slow, slow + fast)), server)
        page = page_renders(database, analyst)
    simulation = {
        "client_reports": old, "client_wall_s": old_wall, "client_cpu_s": old_cpu,
        "batched_reports": new, "batched_wall_s": new_wall, "batched_cpu_s": new_cpu,
        "wall_ratio_per_report": (old_wall / old) / (new_wall / new),
        "cpu_ratio_per_report": (old_cpu / old) / (new_cpu / new)}
    print(f"simulating installs, µs a report (wall / CPU incl. the collector), "
          f"load {os.getloadavg()[0]:.1f}:")
    print(f"  through the client   {1e6 * old_wall / old:8.0f} / {1e6 * old_cpu / old:8.0f}"
          f"   ({old:,} reports)")
    print(f"  made in batches      {1e6 * new_wall / new:8.0f} / {1e6 * new_cpu / new:8.0f}"
          f"   ({new:,} reports)")
    print(f"  ratio                {simulation['wall_ratio_per_report']:8.1f} / "
          f"{simulation['cpu_ratio_per_report']:8.1f}")
    print(f"discovery page, s (wall / CPU): first {page['cold_wall_s']:.2f} / "
          f"{page['cold_cpu_s']:.2f} ({page['walks']} walks), again {page['warm_wall_s']:.2f} / "
          f"{page['warm_cpu_s']:.2f}; ratio {page['wall_ratio']:.1f} / {page['cpu_ratio']:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"quick": args.quick, "load": os.getloadavg()[0],
                                    "simulation": simulation, "discovery_page": page},
                                   indent=2))


if __name__ == "__main__":
    main()
