"""Parquet export against a bare copy of the same rows, on SQLite and on PostgreSQL.

``python benchmarks/export.py [--quick] [--out FILE]`` builds one database per backend holding
four campaigns' reports interleaved in append order (OLH ``{"a","b","y"}`` and RAPPOR
``{"cohort","bits"}`` payloads, canonical JSON as ingest stores them, over seven daily time
buckets, spread over seven partitions where the PostgreSQL schema has daily ones), folds
them, and exports one OLH and one RAPPOR campaign three ways, taking turns:

* **Chorus, in process**: ``jobs.export.export_parquet``;
* **Chorus, the command**: ``chorus export NAME --parquet DIR`` in a child process (its
  interpreter and imports included);
* **bare**: one cursor (a server-side one on PostgreSQL) selecting the campaign's
  ``seq, time, payload`` at or below the watermark in seq order, straight into pyarrow's
  ``ParquetWriter`` with the same schema, files and row groups.

Each figure is reports/s by wall clock and by CPU: the process's own (the child's for the
command) plus, on PostgreSQL, the database server's. Ratios are to the bare copy of the same
campaign in the same run; every export's rows are checked against the bare copy's.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' throwaway PostgreSQL server

from chorus_collector.cli.progress import staged  # noqa: E402
from chorus_collector.jobs.export import ROW_GROUP, ROWS_PER_FILE, export_parquet  # noqa: E402
from chorus_collector.jobs.folding import fold  # noqa: E402
from chorus_collector.storage import StoredReport, open_storage  # noqa: E402
from chorus_shared import campaign_from_spec  # noqa: E402
from chorus_shared.campaign import canonical_json  # noqa: E402

DAY = 86_400
DAYS = 7
SPECS: dict[str, dict[str, Any]] = {
    "olh": {"mechanism": "olh", "epsilon": 2.0, "domain": [f"v{i}" for i in range(1024)]},
    "rappor": {"mechanism": "rappor", "epsilon": 4.0, "domain": {"kind": "strings"},
               "params": {"k": 128, "h": 2, "m": 32}},
    "krr": {"mechanism": "krr", "epsilon": 2.0, "domain": [f"c{i}" for i in range(16)]},
    "olh_other": {"mechanism": "olh", "epsilon": 1.0, "domain": [f"w{i}" for i in range(256)]},
}
EXPORTED = ("olh", "rappor")
DISTINCT_PAYLOADS = 5_000  # drawn by the real mechanisms, then repeated at random


def _payload_texts(name: str, rng: random.Random) -> list[str]:
    campaign = campaign_from_spec({"name": name, "min_batch_size": 1, **SPECS[name]})
    mechanism = campaign.mechanism
    spec = SPECS[name]["domain"]
    values = spec if isinstance(spec, list) else [f"https://site-{i}.example/"
                                                 for i in range(100)]
    return [canonical_json(mechanism.randomize(mechanism.encode(rng.choice(values)), rng)
                           ).decode() for _ in range(DISTINCT_PAYLOADS)]


def build(database: str, per_campaign: int, now: float) -> dict[str, int]:
    """The database: every campaign's reports interleaved, 10,000 rows a transaction;
    returns each campaign's id."""
    storage = open_storage(database)
    storage.migrate()
    ensure = getattr(storage, "ensure_partitions", None)
    if ensure is not None:
        ensure(now, behind_days=DAYS)
    rng = random.Random(7)
    ids, texts = {}, {}
    for name, spec in SPECS.items():
        stored, _ = storage.insert_campaign(campaign_from_spec(
            {"name": name, "min_batch_size": 1, **spec}))
        ids[name], texts[name] = stored.id, _payload_texts(name, rng)
    first_day = int(now // DAY) * DAY - (DAYS - 1) * DAY
    chunk = 10_000
    for start in range(0, per_campaign, chunk):
        size = min(chunk, per_campaign - start)
        with storage.write() as conn:
            for name in SPECS:  # interleaved: each campaign's rows between the others'
                rows = [StoredReport(rng.randbytes(16), first_day + DAY * rng.randrange(DAYS),
                                     rng.choice(texts[name])) for _ in range(size)]
                storage.insert_reports(conn, ids[name], rows)
    fold(storage)
    storage.close()
    return ids


def bare_copy(database: str, campaign_id: int, watermark: int, directory: Path) -> int:
    """The floor: one cursor into ParquetWriter, same schema, files and row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("seq", pa.int64()), ("time", pa.int64()), ("payload", pa.string())])
    sql = ("SELECT seq, time, payload FROM reports WHERE campaign_id = {0} AND seq <= {0} "
           "ORDER BY seq")
    if database.startswith("postgresql:"):
        import psycopg

        conn: Any = psycopg.connect(database)
        cursor = conn.cursor(name="bare_export")  # server-side, in the transaction
        cursor.execute(sql.format("%s"), (campaign_id, watermark))
    else:
        conn = sqlite3.connect(database)
        cursor = conn.execute(sql.format("?"), (campaign_id, watermark))
    directory.mkdir(parents=True)
    total, files, writer, in_file = 0, 0, None, 0
    try:
        while rows := cursor.fetchmany(min(ROW_GROUP, ROWS_PER_FILE - in_file)):
            if writer is None:
                writer = pq.ParquetWriter(directory / f"part-{files:05d}.parquet", schema)
                files += 1
            seqs, times, payloads = zip(*rows, strict=True)
            writer.write_table(pa.table([seqs, times, payloads], schema=schema))
            in_file += len(rows)
            total += len(rows)
            if in_file == ROWS_PER_FILE:
                writer.close()
                writer, in_file = None, 0
    finally:
        if writer is not None:
            writer.close()
        conn.close()
    return total


def _command(command: list[str], name: str, database: str, directory: Path) -> None:
    subprocess.run([*command, name, "--parquet", str(directory), "--database", database],
                   check=True, stdout=subprocess.DEVNULL)


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(work: Callable[[], object], server_cpu: Callable[[], float]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: this process, its children and the database server)."""
    cpu = time.process_time() + _cpu_of_children() + server_cpu()
    start = time.perf_counter()
    work()
    wall = time.perf_counter() - start
    return wall, time.process_time() + _cpu_of_children() + server_cpu() - cpu


def _rows(directory: Path) -> list[tuple[int, int, str]]:
    import pyarrow.parquet as pq

    table = pq.read_table(sorted(directory.glob("part-*.parquet")))
    return list(zip(*(table.column(c).to_pylist() for c in ("seq", "time", "payload")),
                    strict=True))


def bench_backend(database: str, per_campaign: int, rounds: int, workdir: Path,
                  server_cpu: Callable[[], float]) -> dict[str, Any]:
    import pyarrow.parquet  # noqa: F401  (imported before any timing: in-process ways share it)

    now = time.time()
    ids = build(database, per_campaign, now)
    storage = open_storage(database)
    watermark = storage.fold_status().watermark
    command = [str(Path(sys.executable).with_name("chorus")), "export"]
    out: dict[str, Any] = {"reports_in_table": per_campaign * len(SPECS)}
    for name in EXPORTED:
        ways: dict[str, Callable[[Path], object]] = {
            "bare": partial(bare_copy, database, ids[name], watermark),
            "in_process": partial(export_parquet, storage, name),
            "command": partial(_command, command, name, database),
        }
        totals = {way: [0.0, 0.0] for way in ways}
        for turn in range(rounds):  # taking turns: drift falls on all three alike
            for way, work in ways.items():
                directory = workdir / f"{name}-{way}-{turn}"
                wall, cpu = measure(partial(work, directory), server_cpu)
                totals[way][0] += wall
                totals[way][1] += cpu
                if turn == 0:
                    if way == "bare":
                        expected = _rows(directory)
                    else:
                        assert _rows(directory) == expected, f"{way} differs from the bare copy"
                shutil.rmtree(directory)
        reports = len(expected) * rounds
        row: dict[str, Any] = {"reports": len(expected)}
        for way, (wall, cpu) in totals.items():
            row[f"{way}_reports_per_s"] = reports / wall
            row[f"{way}_reports_per_cpu_s"] = reports / cpu
        for way in ("in_process", "command"):
            row[f"{way}_ratio"] = totals["bare"][0] / totals[way][0]
            row[f"{way}_cpu_ratio"] = totals["bare"][1] / totals[way][1]
        out[name] = row
    storage.close()
    return out


def _postgres_cpu(postgres: Any) -> Callable[[], float]:
    """The PostgreSQL server's CPU seconds: the postmaster and its backends."""
    from run import server_cpu_seconds
    from storage_engines import postmaster_pid

    pid = postmaster_pid(postgres)
    return lambda: server_cpu_seconds(pid)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "export.json")
    args = parser.parse_args(argv)
    from helpers.postgres import running_postgres

    per_campaign, rounds = (5_000, 1) if args.quick else (250_000, 3)
    results: dict[str, Any] = {"quick": args.quick, "reports_per_campaign": per_campaign,
                               "rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="chorus-export-") as tmp, \
            running_postgres() as postgres:
        workdir = Path(tmp)
        stages = [("SQLite", "sqlite"), ("PostgreSQL", "postgresql")]
        for _, backend in staged(stages, "benchmarks/export.py"):
            if backend == "postgresql":
                database, server_cpu = postgres.new_schema(), _postgres_cpu(postgres)
            else:
                database, server_cpu = str(workdir / "export.db"), (lambda: 0.0)
            results[backend] = bench_backend(database, per_campaign, rounds, workdir,
                                             server_cpu)
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {args.out}")
    return results


def print_table(results: dict[str, Any]) -> None:
    print(f"{'backend':<11}{'campaign':<9}{'reports':>9}{'bare rep/s':>12}"
          f"{'in process':>12}{'wall':>6}{'CPU':>6}{'command':>11}{'wall':>6}{'CPU':>6}")
    for backend in ("sqlite", "postgresql"):
        for name in EXPORTED:
            row = results[backend][name]
            print(f"{backend:<11}{name:<9}{row['reports']:>9,}{row['bare_reports_per_s']:>12,.0f}"
                  f"{row['in_process_reports_per_s']:>12,.0f}{row['in_process_ratio']:>6.2f}"
                  f"{row['in_process_cpu_ratio']:>6.2f}{row['command_reports_per_s']:>11,.0f}"
                  f"{row['command_ratio']:>6.2f}{row['command_cpu_ratio']:>6.2f}")
    print(f"(each campaign one of {len(SPECS)} interleaved in a table of "
          f"{results['sqlite']['reports_in_table']:,} reports over {DAYS} daily buckets; "
          "ratios: bare seconds / Chorus seconds, by wall clock and by CPU)")


if __name__ == "__main__":
    main(sys.argv[1:])
