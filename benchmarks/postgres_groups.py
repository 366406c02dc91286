"""What a group commit's transaction costs PostgreSQL's server, by the group's size.

``python benchmarks/postgres_groups.py [--quick] [--out FILE]`` appends k-RR reports to a
throwaway PostgreSQL server (loopback only) the way the collector's group commit does: each
transaction is the one statement ``PostgresStorage`` sends for a group of single reports
(``_append_together`` with ``commit``: the append lock, the exclusion-constrained key,
``ON CONFLICT DO NOTHING``, committed with the WAL flushed), from 1 connection and from 4 at
once, for groups of 1, 2, 4 and 16 reports. The baseline, in the same run and on the same
server: the same rows in the same groups as a bare ``INSERT … SELECT unnest(…)`` into a
table with no key and no index. Per report: the database server's CPU (the postmaster and
its backends), this process's CPU (psycopg's share of a collector's), and the wall clock,
each the median of 3 rounds.

It explains ``benchmarks/storage_engines.py``'s single-report ratio: under its load a group
holds about 2 reports, and the server's cost is almost all per transaction (docs/
benchmarks.md). Every load is bounded in count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' throwaway PostgreSQL server

from run import server_cpu_seconds  # noqa: E402
from storage_engines import SPEC, postmaster_pid  # noqa: E402

from chorus_collector.storage.postgres import PostgresStorage  # noqa: E402
from chorus_collector.storage.values import StoredReport  # noqa: E402
from chorus_shared.campaign import campaign_from_spec  # noqa: E402

GROUPS = (1, 2, 4, 16)
CONNECTIONS = (1, 4)
ROUNDS = 3
WARM_UP = 6  # statements before the measured ones: psycopg prepares a statement at its 5th
BARE = ("INSERT INTO bare_reports (campaign_id, report_id, time, payload) "
        "SELECT * FROM unnest(%s::integer[], %s::bytea[], %s::bigint[], %s::text[])")


def _group(campaign_id: int, size: int) -> list[tuple[int, StoredReport]]:
    return [(campaign_id, StoredReport(os.urandom(16), 1_700_000_000, str(value % 64)))
            for value in range(size)]


def _run(storage: PostgresStorage, statement: str, campaign_id: int, group: int,
         connections: int, reports: int, database: int) -> dict[str, float | None]:
    """``reports`` reports in groups of ``group``, shared by ``connections`` threads, each on
    its own connection; CPU per report of the database server and of this process. Opening
    the connections, preparing the statements and closing them are left out: each thread
    connects and warms up before the first barrier and leaves after the last."""
    per_thread = max(1, reports // group // connections)
    start, end = threading.Barrier(connections + 1), threading.Barrier(connections + 1)
    errors: list[BaseException] = []

    def append(conn: Any) -> None:
        appends = _group(campaign_id, group)
        if statement == "chorus":
            storage._begin_write(conn)
            outcomes = storage._append_together(conn, appends, commit=True)
            if outcomes != [True] * group:
                raise AssertionError(f"appended {outcomes}, not all {group}")
        else:
            conn.raw.execute(BARE, ([c for c, _ in appends], [r.report_id for _, r in appends],
                                    [r.time for _, r in appends],
                                    [r.payload_json for _, r in appends]))

    def work() -> None:
        try:
            conn = storage.connect()  # this thread's own
            for _ in range(WARM_UP):
                append(conn)
        except BaseException as error:
            errors.append(error)
        start.wait()
        try:
            if not errors:
                for _ in range(per_thread):
                    append(conn)
        except BaseException as error:
            errors.append(error)
        end.wait()
        storage.close()

    threads = [threading.Thread(target=work) for _ in range(connections)]
    for thread in threads:
        thread.start()
    start.wait()
    server, client = server_cpu_seconds(database), time.process_time()
    started = time.perf_counter()
    end.wait()
    wall = time.perf_counter() - started
    server_seconds = server_cpu_seconds(database) - server
    client_seconds = time.process_time() - client
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    done = per_thread * group * connections
    return {"reports": done,
            "server_cpu_us_per_report": _micros_each(server_seconds, done),
            "client_cpu_us_per_report": _micros_each(client_seconds, done),
            "wall_us_per_report": wall / done * 1e6}


def _micros_each(seconds: float, reports: int) -> float | None:
    """CPU µs a report; None where the CPU read 0 (under one clock tick: a --quick cell)."""
    return seconds / reports * 1e6 if seconds else None


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (None if any round's was)."""
    row: dict[str, Any] = {"reports": sum(r["reports"] for r in rounds)}
    for figure in ("server_cpu_us_per_report", "client_cpu_us_per_report",
                   "wall_us_per_report"):
        values = [r[figure] for r in rounds]
        row[figure] = None if None in values else statistics.median(values)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench-results" / "postgres_groups.json")
    args = parser.parse_args(argv)
    from helpers.postgres import running_postgres

    reports = 960 if args.quick else 12_000
    measured: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    with running_postgres() as postgres:
        storage = PostgresStorage(postgres.new_schema())
        storage.migrate()
        stored, _ = storage.insert_campaign(campaign_from_spec(SPEC))
        conn = storage.connect()
        conn.execute("CREATE TABLE bare_reports (campaign_id INTEGER NOT NULL, "
                     "report_id BYTEA NOT NULL, time BIGINT NOT NULL, payload TEXT NOT NULL)")
        database = postmaster_pid(postgres)
        # Every cell once a round, the rounds in turn: a noisy neighbour slows all alike.
        for number in range(ROUNDS):
            print(f"benchmarks/postgres_groups.py: round {number + 1} of {ROUNDS}",
                  file=sys.stderr, flush=True)
            for connections in CONNECTIONS:
                for group in GROUPS:
                    for statement in ("chorus", "bare"):
                        measured.setdefault((statement, group, connections), []).append(
                            _run(storage, statement, stored.id, group, connections, reports,
                                 database))
        storage.close()
    results = {"rows": [{"statement": statement, "group": group, "connections": connections,
                         **_median(rounds)}
                        for (statement, group, connections), rounds in measured.items()]}
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")
    return results


def _short(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(results: dict[str, Any]) -> None:
    print("server CPU a report, µs (chorus's statement / a bare INSERT with no key; "
          "this process's CPU in brackets; n/a: under one clock tick)")
    print(f"{'connections':<12}" + "".join(f"{f'groups of {g}':>24}" for g in GROUPS))
    for connections in CONNECTIONS:
        cells = []
        for group in GROUPS:
            chorus, bare = (next(r for r in results["rows"] if r["statement"] == statement
                                 and r["group"] == group and r["connections"] == connections)
                            for statement in ("chorus", "bare"))
            cells.append(f"{_short(chorus['server_cpu_us_per_report'], '.1f')} / "
                         f"{_short(bare['server_cpu_us_per_report'], '.1f')} "
                         f"({_short(chorus['client_cpu_us_per_report'], '.0f')})")
        print(f"{connections:<12}" + "".join(f"{cell:>24}" for cell in cells))


if __name__ == "__main__":
    main()
