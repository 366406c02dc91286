"""Chorus at 10⁷ reports: ``python benchmarks/scale.py [--quick]`` (part of ``make bench``).

* aggregation: 10⁷ simulated reports per mechanism (``chorus_collector.design.simulate``, tested to
  draw the client's distribution) streamed in chunks through the estimator's map and merged;
  reports/s of the map alone, and the peak RSS of the whole process (each mechanism runs in a
  fresh subprocess, so the figure is its own), against the 500 MB target;
* estimate latency on a campaign holding 10⁷ stored reports (raw rows in SQLite and the
  per-bucket statistics, 24 hourly buckets) against one holding 10³: it should not grow;
* a query over an unfolded tail of 10⁶ reports (OLH, d = 1,024; RAPPOR, 100 candidates), as
  when folding falls behind: its peak anonymous RSS above the process's before the query
  (sampled every 5 ms), its wall and
  CPU time the first time (mapping the tail, page by page) and the next ones (mapping nothing
  new; median of 5), each against the same query once the tail is folded (median of 5), in
  the same process.

Writes ``bench-results/scale.json``. Every loop is bounded by its report count.
"""

from __future__ import annotations

import argparse
import json
import resource
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from chorus_collector.cli.progress import staged

SPECS: dict[str, dict[str, Any]] = {
    "krr": {"mechanism": "krr", "epsilon": 2.0, "domain": [f"c{i}" for i in range(16)]},
    "oue": {"mechanism": "oue", "epsilon": 1.0, "domain": [f"c{i}" for i in range(64)]},
    "olh": {"mechanism": "olh", "epsilon": 1.0, "domain": [f"c{i}" for i in range(1024)]},
    "rappor": {"mechanism": "rappor", "epsilon": 4.0, "domain": {"kind": "strings"},
               "params": {"k": 128, "h": 2, "m": 32}},
}
CHUNK = 100_000


def _campaign(name: str) -> Any:
    from chorus_shared import campaign_from_spec

    return campaign_from_spec({"name": name, **SPECS[name]}, warn=False)


def _inputs(name: str, campaign: Any, n: int, rng: np.random.Generator) -> Any:
    if name == "rappor":
        return np.array([f"https://site-{i}.example/" for i in rng.zipf(1.5, n) % 100],
                        dtype=object)
    d = len(campaign.mechanism.domain.values)
    return np.minimum(rng.zipf(1.3, n) - 1, d - 1)


def aggregate_one(name: str, total: int) -> dict[str, Any]:
    """In this process: stream ``total`` reports through map/merge; time and peak RSS."""
    from chorus_collector.design.simulate import simulate
    from chorus_collector.estimators import estimator_for

    campaign = _campaign(name)
    mechanism = campaign.mechanism
    estimator = estimator_for(mechanism.name)
    state = np.zeros(estimator.state_size(mechanism), dtype=np.int64)
    rng = np.random.default_rng(3)
    map_seconds = 0.0
    started = time.perf_counter()
    for start in range(0, total, CHUNK):
        size = min(CHUNK, total - start)
        payloads = simulate(mechanism, _inputs(name, campaign, size, rng), rng)
        t0 = time.perf_counter()
        state += estimator.map(mechanism, payloads)
        map_seconds += time.perf_counter() - t0
        del payloads
    return {"reports": total, "map_reports_per_s": total / map_seconds,
            "wall_s": time.perf_counter() - started,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_aggregation(total: int) -> dict[str, Any]:
    out = {}
    for name, _ in staged([(name, name) for name in SPECS], "10⁷ reports, map"):
        run = subprocess.run([sys.executable, __file__, "--one", name, "--reports",
                              str(total)], capture_output=True, text=True, timeout=1800,
                             check=True)
        out[name] = json.loads(run.stdout)
    return out


def _stored_campaign(workdir: Path, reports: int) -> tuple[Any, Any]:
    """A collector database holding ``reports`` k-RR reports over 24 hourly buckets, appended
    directly (as ingest would) and folded into the per-bucket statistics."""
    from chorus_collector import create_app
    from chorus_collector.design.simulate import simulate
    from chorus_collector.jobs.folding import fold
    from chorus_collector.storage import StoredReport

    app = create_app({"DATABASE": str(workdir / f"scale-{reports}.db"), "ANALYST_TOKEN": "t",
                      "SQLITE_SYNCHRONOUS": "NORMAL"})
    storage = app.extensions["chorus.storage"]
    campaign = _campaign("krr")
    stored, _ = storage.insert_campaign(campaign)
    rng = np.random.default_rng(5)
    hour0 = campaign.time_bucket(time.time()) - 24 * 3600
    for start in range(0, reports, CHUNK):
        size = min(CHUNK, reports - start)
        payloads = simulate(campaign.mechanism, _inputs("krr", campaign, size, rng), rng)
        hours = rng.integers(0, 24, size=size)
        with storage.write() as conn:
            storage.insert_reports(conn, stored.id, [
                StoredReport(secrets.token_bytes(16), int(hour0 + 3600 * h), json.dumps(p))
                for p, h in zip(payloads, hours.tolist(), strict=True)])
    fold(storage)  # as the collector's background folder would
    return app, campaign


def bench_estimates(sizes: list[int], workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _, size in staged([(f"{size:,} reports", size) for size in sizes], "estimates"):
        started = time.perf_counter()
        app, campaign = _stored_campaign(workdir, size)
        build = time.perf_counter() - started
        http = app.test_client()
        url = f"/v1/campaigns/{campaign.name}/estimates"
        headers = {"Authorization": "Bearer t"}
        first = http.post(url, json={}, headers=headers)
        assert first.status_code == 200 and first.get_json()["n"] == size
        latencies = []
        for _ in range(20):
            t0 = time.perf_counter()
            http.post(url, json={}, headers=headers)
            latencies.append(time.perf_counter() - t0)
        with sqlite3.connect(workdir / f"scale-{size}.db") as conn:
            stored = conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0]
        out[str(size)] = {"stored_reports": stored, "median_ms":
                          statistics.median(latencies) * 1000, "build_s": build}
    small, large = out[str(sizes[0])], out[str(sizes[-1])]
    out["ratio_largest_to_smallest"] = large["median_ms"] / small["median_ms"]
    return out


TAIL_CANDIDATES = [f"https://site-{i}.example/" for i in range(100)]


def _tail_database(name: str, reports: int, path: Path) -> None:
    """A collector database whose campaign ``name`` holds ``reports`` unfolded reports over
    24 hourly buckets (appended as ingest would; no fold ran)."""
    from chorus_collector.design.simulate import simulate
    from chorus_collector.storage import SQLiteStorage, StoredReport

    storage = SQLiteStorage(str(path), synchronous="NORMAL")
    storage.migrate()
    campaign = _campaign(name)
    stored, _ = storage.insert_campaign(campaign)
    rng = np.random.default_rng(9)
    hour0 = campaign.time_bucket(time.time()) - 24 * 3600
    for start in range(0, reports, CHUNK):
        size = min(CHUNK, reports - start)
        payloads = simulate(campaign.mechanism, _inputs(name, campaign, size, rng), rng)
        hours = rng.integers(0, 24, size=size)
        with storage.write() as conn:
            storage.insert_reports(conn, stored.id, [
                StoredReport(secrets.token_bytes(16), int(hour0 + 3600 * h), json.dumps(p))
                for p, h in zip(payloads, hours.tolist(), strict=True)])
    storage.close()


def _anonymous_rss_mb() -> float:
    """This process's resident anonymous memory (its heap: not the database file's pages
    SQLite reads, which the kernel may drop), from /proc; ru_maxrss where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tail_query_one(name: str, database: str) -> dict[str, Any]:
    """In this process: one query over the unfolded tail (then again), then the same query
    once it is folded; the peak RSS the first query added."""
    from chorus_collector import create_app
    from chorus_collector.jobs.folding import fold

    app = create_app({"DATABASE": database, "ANALYST_TOKEN": "t", "FOLD_INTERVAL": 0})
    http = app.test_client()
    url = f"/v1/campaigns/{name}/estimates"
    body = {"candidates": TAIL_CANDIDATES} if name == "rappor" else {}
    headers = {"Authorization": "Bearer t"}

    def query() -> tuple[float, float, dict[str, Any]]:
        wall, cpu = time.perf_counter(), time.process_time()
        reply = http.post(url, json=body, headers=headers)
        assert reply.status_code == 200, reply.get_data(as_text=True)
        return time.perf_counter() - wall, time.process_time() - cpu, reply.get_json()

    rss = _anonymous_rss_mb()
    peak = [rss]
    done = threading.Event()

    def sample() -> None:  # the query's peak, sampled: ru_maxrss keeps the build's and imports'
        while not done.wait(0.005):
            peak[0] = max(peak[0], _anonymous_rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        first_s, first_cpu, answer = query()
    finally:
        done.set()
        sampler.join(10)
    unfolded = answer["freshness"]["unfolded_reports"]
    again = [query() for _ in range(5)]  # nothing new to map: the kept statistics
    again_s = statistics.median(a[0] for a in again)
    again_cpu = statistics.median(a[1] for a in again)
    fold(app.extensions["chorus.storage"])
    folded = [query() for _ in range(5)]
    assert folded[0][2]["freshness"]["unfolded_reports"] == 0
    folded_s = statistics.median(f[0] for f in folded)
    folded_cpu = statistics.median(f[1] for f in folded)
    return {"unfolded_reports": unfolded, "rss_before_mb": rss, "added_peak_rss_mb": peak[0] - rss,
            "first_s": first_s, "first_cpu_s": first_cpu, "again_s": again_s,
            "again_cpu_s": again_cpu, "folded_ms": folded_s * 1000,
            "folded_cpu_ms": folded_cpu * 1000, "ratio_first_to_folded": first_s / folded_s,
            "ratio_again_to_folded": again_s / folded_s,
            "cpu_ratio_first_to_folded": first_cpu / folded_cpu,
            "cpu_ratio_again_to_folded": again_cpu / folded_cpu}


def bench_tail(reports: int, workdir: Path) -> dict[str, Any]:
    out = {}
    for name, _ in staged([(name, name) for name in ("olh", "rappor")],
                          f"{reports:,} unfolded reports, one query"):
        path = workdir / f"tail-{name}.db"
        _tail_database(name, reports, path)
        run = subprocess.run([sys.executable, __file__, "--tail-query", name, "--database",
                              str(path)], capture_output=True, text=True, timeout=1800,
                             check=True)
        out[name] = json.loads(run.stdout)
        assert out[name]["unfolded_reports"] == reports
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10⁵ reports (a smoke test)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/scale.json"))
    parser.add_argument("--one", choices=sorted(SPECS), help=argparse.SUPPRESS)
    parser.add_argument("--reports", type=int, default=10_000_000, help=argparse.SUPPRESS)
    parser.add_argument("--tail-query", choices=sorted(SPECS), help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--only-tail", action="store_true",
                        help="only the unfolded-tail query (10⁶ reports; 2·10⁴ with --quick)")
    args = parser.parse_args(argv)
    if args.one:
        result = aggregate_one(args.one, args.reports)
        print(json.dumps(result))
        return result
    if args.tail_query:
        result = tail_query_one(args.tail_query, args.database)
        print(json.dumps(result))
        return result
    total = 100_000 if args.quick else 10_000_000
    tail = 20_000 if args.quick else 1_000_000
    results: dict[str, Any] = {"quick": args.quick, "reports": total}
    with tempfile.TemporaryDirectory(prefix="chorus-scale-") as tmp:
        if not args.only_tail:
            results["aggregation"] = bench_aggregation(total)
            results["estimates"] = bench_estimates([1_000, total], Path(tmp))
        results["tail"] = bench_tail(tail, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    _print_tail(results["tail"])
    if args.only_tail:
        return results
    print(f"{'mechanism':<10}{'reports':>12}{'map rep/s':>14}{'peak RSS MB':>13}{'wall s':>9}")
    for name, row in results["aggregation"].items():
        print(f"{name:<10}{row['reports']:>12,}{row['map_reports_per_s']:>14,.0f}"
              f"{row['peak_rss_mb']:>13.0f}{row['wall_s']:>9.1f}")
    estimates = results["estimates"]
    print(f"estimate latency (krr, 24 buckets): {estimates['1000']['median_ms']:.2f} ms at 10³ "
          f"reports, {estimates[str(total)]['median_ms']:.2f} ms at {total:,} "
          f"(ratio {estimates['ratio_largest_to_smallest']:.2f})")
    print(f"\nwritten to {args.out}")
    return results


def _print_tail(tail: dict[str, Any]) -> None:
    print(f"{'unfolded tail':<14}{'reports':>10}{'+peak RSS MB':>14}{'first s (cpu)':>16}"
          f"{'again ms':>10}{'folded ms':>11}{'first/folded':>14}{'again/folded':>14}")
    for name, row in tail.items():
        print(f"{name:<14}{row['unfolded_reports']:>10,}{row['added_peak_rss_mb']:>14.0f}"
              f"{row['first_s']:>9.2f} ({row['first_cpu_s']:.2f}){row['again_s'] * 1000:>10.1f}"
              f"{row['folded_ms']:>11.1f}{row['ratio_first_to_folded']:>14.0f}"
              f"{row['ratio_again_to_folded']:>14.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
