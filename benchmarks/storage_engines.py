"""PostgreSQL beside SQLite, in one run on one machine: ingest, bytes per report, storage under
a steady load.

``python benchmarks/storage_engines.py [--quick] [--out FILE]`` measures, for each backend:

* **single-report ingest**: 8 threads post one k-RR report per request to ``chorus serve``
  (2 workers × 8 threads) on loopback, bounded in count and time; reports/s by wall clock,
  and the CPU time the server spent per report (the collector's processes, and for PostgreSQL
  the database server's too, also shown apart: SQLite works inside the collector). Both
  servers run side by side and each load in 3 rounds, the two backends' back to back in
  alternating order: the ratios are the medians of the rounds' ratios (a noisy machine moved
  a one-round ratio by ±15% between runs);
* **batch ingest**: the same with 1,000-report batches;
* **bytes per report**: the reports table with its indexes, over the reports it holds;
* **steady load**: day after day, a day's reports (a twentieth of them late by two days) are
  appended, folded and ``gc``-ed with a 3-day expiry, so the reports held stay constant;
  the storage of the reports table on the last day over the storage on the middle day
  (1.0: flat; from the fifth on as many reports are held each day).

PostgreSQL / SQLite ratios are printed and written beside the figures (wall clock and CPU).
Every load is bounded in count and time; servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' throwaway PostgreSQL server

from ingest import _post  # noqa: E402
from run import _figure, server_cpu_seconds  # noqa: E402

from chorus_collector.design.simulate import simulate  # noqa: E402
from chorus_collector.server.process import CollectorProcess  # noqa: E402
from chorus_shared import campaign_from_config, new_report_id  # noqa: E402

ADMIN = "bench-admin-token"
DAY = 86_400
SPEC = {"name": "k", "mechanism": "krr", "epsilon": 1.0,
        "domain": [f"v{i}" for i in range(64)], "min_batch_size": 1}


def postmaster_pid(server: Any) -> int:
    """The throwaway PostgreSQL server's postmaster: its backends are its children."""
    return int((server.data / "postmaster.pid").read_text().split()[0])


# -- HTTP ingest ----------------------------------------------------------------------------------

def _reports(campaign: Any, count: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    payloads = simulate(campaign.mechanism, rng.integers(0, 64, count).tolist(), rng)
    bucket = campaign.time_bucket(time.time())
    return [{"report_id": new_report_id(), "digest": campaign.digest, "time": bucket,
             "payload": p} for p in payloads]


ROUNDS = 3  # each backend's loads, interleaved with the other's (the order alternating)


def http_ingest(databases: dict[str, str], roots: dict[str, list[int]],
                quick: bool) -> dict[str, dict[str, Any]]:
    """Both backends' servers side by side; each load runs in ``ROUNDS`` rounds, SQLite's
    and PostgreSQL's back to back (the first alternating), so that a noisy neighbour slows
    both alike: the ratio is the median of the rounds' ratios."""
    rng = np.random.default_rng(7)
    singles = (600 if quick else 6_000) // ROUNDS
    batches = (12 if quick else 60) // ROUNDS
    settings = {"ADMIN_TOKEN": ADMIN, "WORKERS": "2", "THREADS": "8", "FOLD_INTERVAL": "0"}
    rows: dict[str, dict[str, Any]] = {name: {} for name in databases}
    with contextlib.ExitStack() as stack:
        servers, campaigns = {}, {}
        for name, database in databases.items():
            server = stack.enter_context(CollectorProcess(database, settings=settings))
            assert server.process is not None
            status, body = _post(server.port, "/v1/campaigns", json.dumps(SPEC).encode(),
                                 ADMIN)
            assert status in (200, 201), body
            servers[name], campaigns[name] = server, campaign_from_config(json.loads(body))
        for kind in ("single", "batch"):
            for number in range(ROUNDS):
                order = list(databases) if number % 2 == 0 else list(databases)[::-1]
                for name in order:
                    reports = (_reports(campaigns[name], singles, rng) if kind == "single"
                               else _reports(campaigns[name], 1000 * batches, rng))
                    bodies = ([json.dumps(r).encode() for r in reports] if kind == "single"
                              else [json.dumps({"reports": reports[i:i + 1000]}).encode()
                                    for i in range(0, len(reports), 1000)])
                    server = servers[name]
                    assert server.process is not None
                    rows[name].setdefault(kind, []).append(_load(
                        server.port, bodies, [server.process.pid], roots[name]))
    return {name: {kind: _pooled(rounds) for kind, rounds in kinds.items()}
            for name, kinds in rows.items()}


def _load(port: int, bodies: list[bytes], processes: list[int],
          database: list[int]) -> dict[str, float]:
    """One round: ``bodies`` posted from 8 threads, bounded in time; the CPU of the collector's
    ``processes`` and of the ``database`` server's, apart."""
    deadline = time.monotonic() + 120

    def send(body: bytes) -> int:
        if time.monotonic() > deadline:
            return 0
        status, reply = _post(port, "/v1/reports", body)
        if status not in (200, 201):
            return 0
        answer = json.loads(reply)
        return int(answer.get("accepted", answer.get("status") == "accepted"))

    cpu = sum(map(server_cpu_seconds, processes))
    database_cpu = sum(map(server_cpu_seconds, database))
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        accepted = sum(pool.map(send, bodies))
    wall = time.perf_counter() - started
    database_seconds = sum(map(server_cpu_seconds, database)) - database_cpu
    return {"reports": accepted, "seconds": wall,
            "cpu_seconds": sum(map(server_cpu_seconds, processes)) - cpu + database_seconds,
            "database_cpu_seconds": database_seconds}


def _pooled(rounds: list[dict[str, float]]) -> dict[str, Any]:
    reports = sum(r["reports"] for r in rounds)
    seconds = sum(r["seconds"] for r in rounds)
    return {"reports": reports, "seconds": seconds, "reports_per_s": reports / seconds,
            "server_cpu_us_per_report": sum(r["cpu_seconds"] for r in rounds)
            / max(reports, 1) * 1e6,
            # Of which the database server's (PostgreSQL's; SQLite works in the collector).
            "database_cpu_us_per_report": sum(r["database_cpu_seconds"] for r in rounds)
            / max(reports, 1) * 1e6,
            "rounds": [{"reports_per_s": r["reports"] / r["seconds"],
                        "server_cpu_us_per_report": r["cpu_seconds"] / max(r["reports"], 1)
                        * 1e6} for r in rounds]}


def bytes_per_report(database: str) -> dict[str, float]:
    from chorus_collector.storage import open_storage

    storage = open_storage(database)
    conn = storage.connect()
    count = conn.execute("SELECT count(*) FROM reports").fetchone()[0]
    size = _reports_size(storage, conn)
    storage.close()
    return {"reports": count, "bytes": size, "bytes_per_report": size / max(count, 1)}


def _reports_size(storage: Any, conn: Any) -> int:
    """The reports table with its indexes (and partitions, in a schema before p004); on SQLite
    the pages of the table and its indexes (the file's free pages are reused, not counted)."""
    if storage.path.startswith("postgresql:"):
        return int(conn.execute("SELECT pg_total_relation_size('reports') + coalesce(sum("
                                "pg_total_relation_size(relid)), 0) FROM pg_partition_tree("
                                "'reports') WHERE relid <> 'reports'::regclass").fetchone()[0])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return int(conn.execute(
        "SELECT sum(pgsize) FROM dbstat WHERE name IN ('reports', 'reports_by_time') "
        "OR name LIKE 'sqlite_autoindex_reports%'").fetchone()[0])


# -- steady load: append, fold, gc, day after day ----------------------------------------------

def steady_load(database: str, quick: bool) -> dict[str, Any]:
    from chorus_collector.jobs.folding import fold
    from chorus_collector.storage import StoredReport, open_storage
    from chorus_shared.campaign import campaign_from_spec

    per_day = 2_000 if quick else 6_000
    days = 12 if quick else 16
    storage = open_storage(database)
    storage.migrate()
    campaign = campaign_from_spec({**SPEC, "name": "steady", "time_precision": 3600,
                                   "report_expiry": 3 * DAY})
    stored, _ = storage.insert_campaign(campaign)
    rng = np.random.default_rng(8)
    start = (int(time.time()) // DAY) * DAY
    sizes, held = [], []
    for day in range(days):
        now = float(start + day * DAY + DAY // 2)
        storage.maintain(now)  # as the server's background folder does
        times = np.where(rng.random(per_day) < 0.05, now - 2 * DAY, now).astype(int)
        rows = [StoredReport(os.urandom(16), int(t) // 3600 * 3600, str(int(v)))
                for t, v in zip(times, rng.integers(0, 64, per_day), strict=True)]
        for offset in range(0, per_day, 1000):
            with storage.write() as conn:
                storage.insert_reports(conn, stored.id, rows[offset:offset + 1000])
        fold(storage, clock=lambda now=now: now)
        storage.drop_expired(now, margin=DAY)
        conn = storage.connect()
        held.append(int(conn.execute("SELECT count(*) FROM reports").fetchone()[0]))
        sizes.append(_reports_size(storage, conn))
    storage.close()
    return {"reports_per_day": per_day, "days": days, "held": held, "bytes": sizes,
            "growth_second_half": sizes[-1] / sizes[days // 2]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench-results" / "storage_engines.json")
    args = parser.parse_args(argv)
    from helpers.postgres import running_postgres

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, running_postgres() as postgres:
        print("benchmarks/storage_engines.py: ingest over HTTP, both backends",
              file=sys.stderr, flush=True)
        databases = {"sqlite": str(Path(tmp) / "ingest.db"), "postgresql": postgres.new_schema()}
        ingest = http_ingest(databases, {"sqlite": [], "postgresql": [postmaster_pid(postgres)]},
                             args.quick)
        for backend in ("sqlite", "postgresql"):
            print(f"benchmarks/storage_engines.py: {backend}, bytes and the steady load",
                  file=sys.stderr, flush=True)
            steady = postgres.new_schema() if backend == "postgresql" \
                else str(Path(tmp) / "steady.db")
            row = ingest[backend]
            row["storage"] = bytes_per_report(databases[backend])
            row["steady_load"] = steady_load(steady, args.quick)
            results[backend] = row
    sqlite, postgres_row = results["sqlite"], results["postgresql"]
    # Each ratio: the median of the rounds' (each round's two loads ran back to back). None
    # where a round's SQLite figure read 0: a --quick round's CPU can be under one clock tick
    # a process on a fast machine.
    results["postgresql_over_sqlite"] = {
        f"{kind}_{figure}": _median_ratio([(p[figure], s[figure]) for p, s in zip(
            postgres_row[kind]["rounds"], sqlite[kind]["rounds"], strict=True)])
        for kind in ("single", "batch")
        for figure in ("reports_per_s", "server_cpu_us_per_report")}
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")
    return results


def _median_ratio(pairs: list[tuple[float, float]]) -> float | None:
    if any(below == 0 for _, below in pairs):
        return None
    return statistics.median(above / below for above, below in pairs)


def print_table(results: dict[str, Any]) -> None:
    for name in ("sqlite", "postgresql"):
        row = results[name]
        steady = row["steady_load"]
        print(f"{name:<11} single {row['single']['reports_per_s']:>7,.0f} reports/s "
              f"({row['single']['server_cpu_us_per_report']:,.0f} µs CPU each, "
              f"{row['single']['database_cpu_us_per_report']:,.0f} of it the database "
              f"server's), batches "
              f"{row['batch']['reports_per_s']:>8,.0f} reports/s "
              f"({row['batch']['server_cpu_us_per_report']:,.0f} µs CPU each); "
              f"{row['storage']['bytes_per_report']:.0f} bytes per report; steady load "
              f"{steady['held'][-1]:,} reports held, storage on the last day / "
              f"the middle one: {steady['growth_second_half']:.2f}")
    ratios = results["postgresql_over_sqlite"]
    print("PostgreSQL / SQLite: " + ", ".join(f"{k} {_figure(v, '.2f')}"
                                             for k, v in ratios.items()))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main(sys.argv[1:])
