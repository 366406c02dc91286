"""Ingest past one request: the write-lock probe, SQLite beside PostgreSQL, storage per report.

``python benchmarks/ingest.py [--quick] [--out FILE]`` measures, in one run on loopback:

* **the write-lock probe**: a victim thread sends single k-RR reports to one campaign while
  another client uploads a 10,000-report batch to an OLH campaign with d = 65,536 (the
  request that held SQLite's write lock for 31.7 s when ingest computed statistics). The
  victim's p50/p99 latency and 5xx count, and how long the batch took, beside the victim's
  latency with no batch at all (the baseline, same run);
* **each backend's ingest**: 1,000-report batches from 8 threads to `chorus serve` on a SQLite
  file and on a PostgreSQL database (a throwaway local server), reports/s side by side;
* **storage per report** on each backend (table and indexes), and from it the storage a
  deployment needs at 10⁶ and 10⁸ reports a day for a 30-day report expiry (what `chorus gc`
  keeps).

Every load is bounded in count and time; servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' throwaway PostgreSQL server

from chorus_collector.cli.progress import staged  # noqa: E402
from chorus_collector.design.simulate import simulate  # noqa: E402
from chorus_collector.server.process import CollectorProcess  # noqa: E402
from chorus_shared import campaign_from_config, new_report_id  # noqa: E402

ADMIN = "bench-admin-token"
EXPIRY_DAYS = 30


def _post(port: int, path: str, body: bytes, token: str | None = None,
          timeout: float = 120) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", path, body=body, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _create(port: int, spec: dict[str, Any]) -> Any:
    status, body = _post(port, "/v1/campaigns", json.dumps(spec).encode(), ADMIN)
    assert status in (200, 201), body
    return campaign_from_config(json.loads(body))


def _reports(campaign: Any, values: list[Any], rng: np.random.Generator) -> list[dict[str, Any]]:
    payloads = simulate(campaign.mechanism, values, rng)
    bucket = campaign.time_bucket(time.time())
    return [{"report_id": new_report_id(), "digest": campaign.digest, "time": bucket,
             "payload": p} for p in payloads]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def write_lock_probe(database: str, quick: bool) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    d = 4096 if quick else 65_536
    batch_size = 1_000 if quick else 10_000
    with CollectorProcess(database, settings={"ADMIN_TOKEN": ADMIN, "WORKERS": "2",
                                              "THREADS": "8"}) as server:
        port = server.port
        victim_campaign = _create(port, {"name": "victim", "mechanism": "krr", "epsilon": 1.0,
                                         "domain": ["a", "b", "c"], "min_batch_size": 1})
        big = _create(port, {"name": "big", "mechanism": "olh", "epsilon": 2.0,
                             "domain": [f"u{i}" for i in range(d)],
                             "min_batch_size": 1})
        batch = json.dumps({"reports": _reports(big, rng.integers(0, d, batch_size).tolist(),
                                                rng)}).encode()

        def victim(seconds: float, stop: threading.Event) -> tuple[list[float], int]:
            latencies, errors = [], 0
            deadline = time.monotonic() + seconds
            for _ in range(5_000):  # bounded in count and time
                if stop.is_set() or time.monotonic() > deadline:
                    break
                body = json.dumps(_reports(victim_campaign, [0], rng)[0]).encode()
                started = time.perf_counter()
                status, _ = _post(port, "/v1/reports", body)
                latencies.append(time.perf_counter() - started)
                errors += status >= 500
                time.sleep(0.01)
            return latencies, errors

        # The no-batch baseline: --quick only checks that it runs (a second, ~50 requests).
        baseline, base_errors = victim(1.0 if quick else 5.0, threading.Event())
        stop = threading.Event()
        result: dict[str, Any] = {}

        def upload() -> None:
            started = time.perf_counter()
            status, _ = _post(port, "/v1/reports", batch, timeout=300)
            result["batch_s"], result["batch_status"] = time.perf_counter() - started, status

        from chorus_collector.storage import open_storage

        storage = open_storage(database)
        with ThreadPoolExecutor(2) as pool:
            probe = pool.submit(victim, 120.0, stop)
            time.sleep(0.2)
            pool.submit(upload).result(timeout=300)
            # The victim goes on until the server's folders have folded the batch (the
            # O(n · d) part of OLH, now outside any request), bounded in time.
            # The batch's own reports, that is: the victim's keep arriving, so a moment with
            # none unfolded at all may never come on a loaded machine.
            uploaded = time.perf_counter()
            conn = storage.connect()
            last_seq = conn.execute("SELECT max(seq) FROM reports").fetchone()[0]

            def batch_left() -> int:
                watermark = storage.fold_status().watermark
                return int(conn.execute("SELECT count(*) FROM reports WHERE seq > ? AND seq <= ?",
                                        (watermark, last_seq)).fetchone()[0])

            deadline = time.monotonic() + 100
            while batch_left() and time.monotonic() < deadline:
                time.sleep(0.1)
            result["folded_after_s"] = time.perf_counter() - uploaded
            result["unfolded_left"] = batch_left()
            time.sleep(0.5)
            stop.set()
            during, errors = probe.result(timeout=120)
        storage.close()
    return {
        "d": d, "batch_reports": batch_size, "batch_seconds": result["batch_s"],
        "batch_status": result["batch_status"], "folded_after_s": result["folded_after_s"],
        "unfolded_left": result["unfolded_left"],
        "victim_baseline_p50_ms": statistics.median(baseline) * 1000,
        "victim_baseline_p99_ms": _percentile(baseline, 0.99) * 1000,
        "victim_p50_ms": statistics.median(during) * 1000,
        "victim_p99_ms": _percentile(during, 0.99) * 1000,
        "victim_requests": len(during), "victim_5xx": errors + base_errors,
    }


def backend_ingest(database: str, quick: bool) -> dict[str, Any]:
    rng = np.random.default_rng(12)
    batches = 20 if quick else 200
    with CollectorProcess(database, settings={"ADMIN_TOKEN": ADMIN, "WORKERS": "2",
                                              "THREADS": "8"}) as server:
        campaign = _create(server.port, {"name": "k", "mechanism": "krr", "epsilon": 1.0,
                                         "domain": [f"v{i}" for i in range(64)],
                                         "min_batch_size": 1})
        bodies = [json.dumps({"reports": _reports(
            campaign, rng.integers(0, 64, 1000).tolist(), rng)}).encode()
            for _ in range(batches)]
        deadline = time.monotonic() + 120

        def send(body: bytes) -> int:
            if time.monotonic() > deadline:
                return 0
            status, reply = _post(server.port, "/v1/reports", body)
            return int(json.loads(reply)["accepted"]) if status == 200 else 0

        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            accepted = sum(pool.map(send, bodies))
        elapsed = time.perf_counter() - started
    return {"reports": accepted, "seconds": elapsed, "reports_per_s": accepted / elapsed}


def bytes_per_report(database: str, reports: int) -> float:
    from chorus_collector.storage import open_storage

    storage = open_storage(database)
    if database.startswith("postgresql:"):
        # The table with its indexes (and its partitions, in a schema before p004).
        size = storage.connect().execute(
            "SELECT pg_total_relation_size('reports') + coalesce(sum("
            "pg_total_relation_size(relid)), 0) FROM pg_partition_tree('reports') "
            "WHERE relid <> 'reports'::regclass").fetchone()[0]
    else:
        conn = storage.connect()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN ('reports', "
                             "'reports_by_time') OR name LIKE 'sqlite_autoindex_reports%'"
                             ).fetchone()[0]
        size = pages
    storage.close()
    return float(size) / max(reports, 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "ingest.json")
    args = parser.parse_args(argv)
    from helpers.postgres import running_postgres

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, running_postgres() as postgres:
        stages = [("write-lock probe", "probe"), ("SQLite", "sqlite"),
                  ("PostgreSQL", "postgresql")]
        for _, backend in staged(stages, "benchmarks/ingest.py"):
            if backend == "probe":
                results["write_lock_probe"] = write_lock_probe(str(Path(tmp) / "probe.db"),
                                                               args.quick)
                continue
            database = (postgres.new_schema() if backend == "postgresql"
                        else str(Path(tmp) / "ingest.db"))
            row = backend_ingest(database, args.quick)
            row["bytes_per_report"] = bytes_per_report(database, row["reports"])
            kept = EXPIRY_DAYS + 1  # the expiry plus gc's one-day margin
            row["gb_kept_at_1e6_per_day"] = row["bytes_per_report"] * 1e6 * kept / 1e9
            row["gb_kept_at_1e8_per_day"] = row["bytes_per_report"] * 1e8 * kept / 1e9
            results[backend] = row
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")
    return results


def print_table(results: dict[str, Any]) -> None:
    probe = results["write_lock_probe"]
    print(f"write-lock probe: an OLH batch of {probe['batch_reports']:,} reports, "
          f"d = {probe['d']:,}, took {probe['batch_seconds']:.2f} s (HTTP "
          f"{probe['batch_status']}) and was folded {probe['folded_after_s']:.1f} s later "
          f"({probe['unfolded_left']} left); meanwhile a victim's single reports: "
          f"p50 {probe['victim_p50_ms']:.1f} ms, p99 {probe['victim_p99_ms']:.1f} ms over "
          f"{probe['victim_requests']} requests, {probe['victim_5xx']} 5xx (no batch: p50 "
          f"{probe['victim_baseline_p50_ms']:.1f} ms, p99 {probe['victim_baseline_p99_ms']:.1f}"
          " ms)")
    sqlite, postgres = results["sqlite"], results["postgresql"]
    for name, row in (("SQLite", sqlite), ("PostgreSQL", postgres)):
        print(f"{name:<11} ingest {row['reports_per_s']:>9,.0f} reports/s "
              f"({row['reports']:,} in 1,000-report batches); {row['bytes_per_report']:.0f} "
              f"bytes per stored report: {row['gb_kept_at_1e6_per_day']:.2f} GB at 10⁶ "
              f"reports/day, {row['gb_kept_at_1e8_per_day']:.0f} GB at 10⁸ "
              f"(30-day expiry + 1-day gc margin)")
    print(f"PostgreSQL / SQLite ingest: {postgres['reports_per_s'] / sqlite['reports_per_s']:.2f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main(sys.argv[1:])
