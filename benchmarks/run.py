"""Chorus benchmarks: ``make bench`` (or ``python benchmarks/run.py [--quick]``).

Prints a table and writes ``bench-results/results.json``. Every figure is paired with a
baseline measured in the same run, so ratios stay comparable across machines:

* client: µs per report (encode + randomize with the OS CSPRNG), against one bare
  ``SystemRandom().random()`` call;
* aggregation: reports/s of each estimator's ``map`` on stored payloads, against
  ``np.bincount`` over as many integers;
* ingest (in process): reports/s through validation, dedup, storage and statistics in
  1,000-report batches, against a bare SQLite ``executemany`` of the same rows;
* estimate: latency of a query on campaigns with 10^3 and 10^5 stored reports (it should not
  grow with n);
* series: latency of a 30-bucket k-RR time series (``analysis.estimate_series``) over 10^4 and
  10^6 folded reports (it reads the per-bucket statistics: the ratio should be about 1), and
  against one window's estimate of the same data;
* HTTP: reports/s and p50/p99 latency against the production server on loopback, batched and
  single-report, bounded in count and time, and reports per server CPU-second (the gunicorn
  master and its workers, the background fold's catch-up included).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import secrets
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import requests

from chorus_collector import create_app
from chorus_collector.cli.progress import staged
from chorus_collector.estimators import estimator_for
from chorus_collector.estimators.local_hashing import support_counts
from chorus_collector.ingest.reports import ingest_reports
from chorus_collector.jobs.folding import fold
from chorus_collector.server.process import CollectorProcess, free_port
from chorus_shared import Campaign, campaign_from_spec, new_report_id

SPECS: dict[str, dict[str, Any]] = {
    "rr": {"mechanism": "rr", "epsilon": 1.0, "domain": ["no", "yes"]},
    "krr": {"mechanism": "krr", "epsilon": 2.0, "domain": [f"c{i}" for i in range(16)]},
    "rappor": {"mechanism": "rappor", "epsilon": 4.0, "domain": {"kind": "strings"},
               "params": {"k": 128, "h": 2, "m": 32}},
    "duchi": {"mechanism": "duchi", "epsilon": 1.0,
              "domain": {"kind": "numeric", "lo": 0, "hi": 10}},
}
VALUES: dict[str, Callable[[random.Random], Any]] = {
    "rr": lambda r: r.choice(["no", "yes"]),
    "krr": lambda r: f"c{r.randrange(16)}",
    "rappor": lambda r: f"https://site-{r.randrange(100)}.example/",
    "duchi": lambda r: r.uniform(0, 10),
}


def campaigns() -> dict[str, Campaign]:
    return {name: campaign_from_spec({"name": name, "min_batch_size": 1, **spec})
            for name, spec in SPECS.items()}


def per_call_seconds(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def report_once(mechanism: Any, draw: Callable[[random.Random], Any], values: random.Random,
                rng: secrets.SystemRandom, assignment: dict[str, int]) -> object:
    """What the client does per report: encode, then randomize with the CSPRNG."""
    return mechanism.randomize(mechanism.encode(draw(values)), rng, assignment)


def bench_client(camps: dict[str, Campaign], n: int) -> dict[str, Any]:
    secure = secrets.SystemRandom()
    baseline = per_call_seconds(secure.random, n)
    out: dict[str, Any] = {"baseline_us": baseline * 1e6}
    values = random.Random(1)
    for name, campaign in camps.items():
        mechanism = campaign.mechanism
        assignment = mechanism.assign(secure)

        one = partial(report_once, mechanism, VALUES[name], values, secure, assignment)
        cost = per_call_seconds(one, n)
        out[name] = {"us_per_report": cost * 1e6, "ratio_to_one_csprng_draw": cost / baseline}
    return out


def payloads(campaign: Campaign, n: int, seed: int = 2) -> list[Any]:
    rng = random.Random(seed)
    mechanism = campaign.mechanism
    # Many simulated users: RAPPOR draws each report's cohort when no assignment is given.
    return [mechanism.randomize(mechanism.encode(VALUES[campaign.name](rng)), rng)
            for _ in range(n)]


def bench_client_sdk(camps: dict[str, Campaign], n: int, workdir: Path) -> dict[str, Any]:
    """The whole ``Client.report()``: encode, randomize, charge, write the outbox."""
    import subprocess

    from chorus_client import Client

    def run(code: str) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    interpreter = run("pass")
    out: dict[str, Any] = {"import_ms": (run("import chorus_client") - interpreter) * 1000,
                           "interpreter_start_ms": interpreter * 1000}
    generous = {name: campaign_from_spec({
        **{k: v for k, v in c.config.items() if k not in ("format", "epsilon")},
        "epsilon": c.epsilon,
        "privacy": {"budget": 1e6, "max_reports": 10**6}})
        for name, c in camps.items()}
    values = random.Random(3)
    for label, state_dir in (("memory", None), ("disk", workdir / "client-state")):
        # Speed only: the caps are lifted so that every report is made.
        client = Client("http://127.0.0.1:9", state_dir=state_dir,
                        ephemeral=state_dir is None, campaigns=generous,
                        lifetime_budget=math.inf, max_epsilon=50.0)
        for name in camps:
            count = n if state_dir is None else max(20, n // 10)
            times = []
            for _ in range(count):
                value = VALUES[name](values)
                start = time.perf_counter()
                client.report(name, value)
                times.append(time.perf_counter() - start)
            out.setdefault(name, {}).update({
                f"report_us_{label}": statistics.fmean(times) * 1e6,
                f"report_p50_us_{label}": statistics.median(times) * 1e6,
            })
    return out


def bench_aggregation(camps: dict[str, Campaign], n: int) -> dict[str, Any]:
    ints = np.random.default_rng(0).integers(0, 16, size=n)
    start = time.perf_counter()
    np.bincount(ints, minlength=16)
    baseline = n / (time.perf_counter() - start)
    out: dict[str, Any] = {"baseline_bincount_reports_per_s": baseline}
    for name, campaign in camps.items():
        data = payloads(campaign, n)
        estimator = estimator_for(campaign.mechanism.name)
        start = time.perf_counter()
        estimator.map(campaign.mechanism, data)
        rate = n / (time.perf_counter() - start)
        out[name] = {"reports_per_s": rate, "ratio_to_bincount": rate / baseline}
    return out


def _on_every_core(n: int, block: int, work: Callable[[range], object]) -> float:
    """Seconds for ``work`` over the blocks of ``block`` of n reports, dealt round-robin to
    one thread per core (each thread gets the starts of its blocks)."""
    workers = os.cpu_count() or 1
    shares = [range(k * block, n, workers * block) for k in range(workers)]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, shares))
    return time.perf_counter() - start


def bench_olh_support(n: int, d: int = 1024) -> dict[str, Any]:
    """OLH support counting (ε = 1, so g = 4, P = 2³¹ − 1) of n reports at d categories on
    every core, beside two numpy evaluations of the same n × d cells on the same threads:
    the hash family as MECHANISMS.md §4 writes it, ((a·v + b) % P) % g in int64 in blocks of
    256 reports, with no comparison and no counting (the issue's ceiling), and a single
    uint32 comparison per cell, less than any numpy method that looks at every cell does."""
    campaign = campaign_from_spec({"name": "olh", "mechanism": "olh", "epsilon": 1.0,
                                   "domain": [f"c{i}" for i in range(d)]})
    prime, g = campaign.mechanism.prime, campaign.mechanism.g
    rng = np.random.default_rng(5)
    a, b = rng.integers(1, prime, size=n), rng.integers(0, prime, size=n)
    y = rng.integers(0, g, size=n)
    start = time.perf_counter()
    support_counts(a, b, y, d, prime, g, workers=os.cpu_count() or 1)
    counting = time.perf_counter() - start

    block, values = 256, np.arange(d, dtype=np.int64)

    def hashes(starts: range) -> None:
        for lo in starts:
            (a[lo:lo + block, None] * values + b[lo:lo + block, None]) % prime % g

    cells = ((a[:block, None] * values + b[:block, None]) % prime).astype(np.uint32)
    bounds = b.astype(np.uint32)

    def one_comparison(starts: range) -> None:
        flags = np.empty((block, d), dtype=bool)
        for lo in starts:
            bound = bounds[lo:lo + block, None]
            np.greater_equal(cells[:len(bound)], bound, out=flags[:len(bound)])

    bare = _on_every_core(n, block, hashes)
    floor = _on_every_core(n, block, one_comparison)
    return {"d": d, "g": g, "prime": prime, "reports": n, "threads": os.cpu_count() or 1,
            "reports_per_s": n / counting, "bare_numpy_hash_reports_per_s": n / bare,
            "ratio_to_bare_numpy_hash": bare / counting,
            "one_comparison_per_cell_reports_per_s": n / floor,
            "ratio_to_one_comparison_per_cell": floor / counting}


def bench_ingest(camps: dict[str, Campaign], n: int, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, campaign in camps.items():
        app = create_app({"DATABASE": str(workdir / f"ingest-{name}.db")})
        storage = app.extensions["chorus.storage"]
        stored, _ = storage.insert_campaign(campaign)
        now = time.time()
        bucket = campaign.time_bucket(now)
        reports = [{"report_id": new_report_id(), "digest": campaign.digest, "time": bucket,
                    "payload": p} for p in payloads(campaign, n)]
        start = time.perf_counter()
        for i in range(0, n, 1000):
            ingest_reports(storage, reports[i:i + 1000], now, campaign=stored)
        rate = n / (time.perf_counter() - start)
        # Baseline: the same rows inserted with a bare executemany, one transaction per 1,000.
        conn = sqlite3.connect(workdir / f"bare-{name}.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE r (id BLOB PRIMARY KEY, t INTEGER, p TEXT) WITHOUT ROWID")
        rows = [(bytes.fromhex(r["report_id"]), r["time"], json.dumps(r["payload"]))
                for r in reports]
        start = time.perf_counter()
        for i in range(0, n, 1000):
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO r VALUES (?, ?, ?)", rows[i:i + 1000])
            conn.execute("COMMIT")
        bare = n / (time.perf_counter() - start)
        conn.close()
        out[name] = {"reports_per_s": rate, "bare_sqlite_reports_per_s": bare,
                     "ratio_to_bare": rate / bare}
    return out


def bench_estimates(camps: dict[str, Campaign], sizes: list[int],
                    workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    candidates = tuple(f"https://site-{i}.example/" for i in range(100))
    for name, campaign in camps.items():
        row: dict[str, Any] = {}
        for size in sizes:
            app = create_app({"DATABASE": str(workdir / f"est-{name}-{size}.db"),
                              "ANALYST_TOKEN": "t"})
            storage = app.extensions["chorus.storage"]
            stored, _ = storage.insert_campaign(campaign)
            now = time.time()
            bucket = campaign.time_bucket(now)
            data = payloads(campaign, size)
            for i in range(0, size, 5000):
                ingest_reports(storage, [{"report_id": new_report_id(),
                                          "digest": campaign.digest, "time": bucket,
                                          "payload": p} for p in data[i:i + 5000]],
                               now, campaign=stored)
            http = app.test_client()
            query = {"candidates": list(candidates)} if name == "rappor" else {}
            url = f"/v1/campaigns/{name}/estimates"
            headers = {"Authorization": "Bearer t"}
            # Before the fold, the query maps every report of the unfolded tail; after it,
            # it reads the per-bucket statistics (what the server's folders keep it at).
            row[f"unfolded_ms_at_{size}"] = _median_query_ms(http, url, query, headers)
            fold(storage)
            row[f"ms_at_{size}"] = _median_query_ms(http, url, query, headers)
        row["ratio_largest_to_smallest"] = (row[f"ms_at_{sizes[-1]}"]
                                            / row[f"ms_at_{sizes[0]}"])
        out[name] = row
    return out


SERIES_BUCKETS = 30


def _series_campaign(campaign: Campaign, reports: int, workdir: Path) -> tuple[Any, Any]:
    """A database holding ``reports`` simulated k-RR reports over SERIES_BUCKETS hourly
    buckets, appended as ingest would and folded, as the server's folders keep it."""
    from chorus_collector.design.simulate import simulate
    from chorus_collector.storage import SQLiteStorage, StoredReport

    storage = SQLiteStorage(str(workdir / f"series-{reports}.db"), synchronous="NORMAL")
    storage.migrate()
    stored, _ = storage.insert_campaign(campaign)
    rng = np.random.default_rng(11)
    hour0 = campaign.time_bucket(time.time()) - SERIES_BUCKETS * 3600
    for start in range(0, reports, 50_000):
        size = min(50_000, reports - start)
        d = len(campaign.config["domain"]["values"])
        payloads = simulate(campaign.mechanism, rng.integers(0, d, size=size), rng)
        hours = rng.integers(0, SERIES_BUCKETS, size=size).tolist()
        with storage.write() as conn:
            storage.insert_reports(conn, stored.id, [
                StoredReport(secrets.token_bytes(16), int(hour0 + 3600 * h), json.dumps(p))
                for p, h in zip(payloads, hours, strict=True)])
    fold(storage)
    return storage, stored


def bench_series(campaign: Campaign, sizes: list[int], workdir: Path) -> dict[str, Any]:
    """The series' cost is flat in the number of reports: O(points × d)."""
    from chorus_collector.analysis import estimate_series, estimate_window
    from chorus_collector.estimators import Query

    d = len(campaign.config["domain"]["values"])
    out: dict[str, Any] = {"buckets": SERIES_BUCKETS, "d": d}
    for size in sizes:
        storage, stored = _series_campaign(campaign, size, workdir)
        result = estimate_series(storage, stored)
        assert sum(p.n for p in result.series[0].points) == size
        assert len(result.series[0].points) == SERIES_BUCKETS
        series = partial(estimate_series, storage, stored)
        window = partial(estimate_window, storage, stored, Query())
        series_s = min(per_call_seconds(series, 5) for _ in range(3))
        window_s = min(per_call_seconds(window, 5) for _ in range(3))
        out[f"ms_at_{size}"] = series_s * 1000
        out[f"one_window_ms_at_{size}"] = window_s * 1000
        out[f"ratio_to_one_window_at_{size}"] = series_s / window_s
    out["ratio_largest_to_smallest"] = out[f"ms_at_{sizes[-1]}"] / out[f"ms_at_{sizes[0]}"]
    return out


def _median_query_ms(http: Any, url: str, query: dict[str, Any],
                     headers: dict[str, str]) -> float:
    first = http.post(url, json=query, headers=headers)
    assert first.status_code == 200, first.get_data(as_text=True)
    latencies = []
    for _ in range(5):
        start = time.perf_counter()
        http.post(url, json=query, headers=headers)
        latencies.append(time.perf_counter() - start)
    return float(statistics.median(latencies) * 1000)


class _Connection:
    """One keep-alive HTTP/1.1 connection per client thread (http.client: far less client CPU
    than requests, which matters when the load generator shares the server's two cores)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request("POST", path, body=body,
                                  headers={"Content-Type": "application/json"})
                reply = self.conn.getresponse()
                return reply.status, reply.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()  # the server closed an idle keep-alive connection
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def _load(port: int, bodies: list[bytes], seconds: float,
          ) -> tuple[list[tuple[float, int, bytes]], float]:
    """POST every body from 16 threads, stopping at the deadline: (answers, elapsed)."""
    local = threading.local()
    deadline = time.monotonic() + seconds  # bounded in time as well as in count

    def post(body: bytes) -> tuple[float, int, bytes] | None:
        if time.monotonic() >= deadline:
            return None  # not sent, not counted
        conn = getattr(local, "conn", None) or _Connection(port)
        local.conn = conn
        start = time.perf_counter()
        status, reply = conn.post("/v1/reports", body)
        return time.perf_counter() - start, status, reply

    start = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        answers = [a for a in pool.map(post, bodies) if a is not None]
    return answers, time.perf_counter() - start


def _summary(answers: list[tuple[float, int, bytes]], elapsed: float,
             size: int) -> dict[str, Any]:
    latencies = sorted(a[0] for a in answers)
    return {
        "requests": len(answers),
        "reports_per_s": len(answers) * size / elapsed,
        "requests_per_s": len(answers) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "errors_5xx": sum(a[1] >= 500 for a in answers),
    }


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (gunicorn's workers), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # it exited meanwhile
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            parents.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(parents.get(found[-1], []))
    return found


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) of a server: the process ``pid`` and all its
    descendants, with their reaped children (a worker that exited counts in its parent's
    cutime/cstime once reaped)."""
    ticks = 0
    for process in _descendants(pid):
        try:
            stat = Path(f"/proc/{process}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the name may hold spaces
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / _CLOCK_TICKS


def _per(amount: float | None, seconds: float | None) -> float | None:
    """``amount / seconds``, or None where either is unknown or the CPU seconds read 0: less
    than one clock tick, which no figure can be made of."""
    if amount is None or not seconds:
        return None
    return amount / seconds


def _figure(value: float | None, spec: str) -> str:
    return "n/a (under one clock tick)" if value is None else format(value, spec)


def bench_http(camps: dict[str, Campaign], batches: int, singles: int, seconds: float,
               workdir: Path, rounds: int = 3) -> dict[str, Any]:
    """A bounded load on loopback from 16 threads, batched then single-report uploads, to the
    production server and, as the baseline, to a bare Flask + SQLite endpoint served the same
    way (benchmarks/bare_server.py); the ratio is what validation, deduplication, metrics and
    the background fold cost.

    The two servers take turns, ``rounds`` rounds each per section, so that drift in a shared
    machine (other load, the page cache, a growing database) falls on both alike; each figure
    is the total over its rounds. Before a baseline round the collector's folders catch up,
    so they never run in the baseline's time. Each round stops after its request count or
    ``seconds``, whichever comes first. Every acknowledged report ID is checked against the
    database afterwards: lost and duplicated reports and 5xx answers must all be zero.
    """
    from chorus_collector.storage import SQLiteStorage, Storage

    campaign = camps["krr"]
    admin = secrets.token_hex(8)
    acked: set[str] = set()
    sent = 0
    database = workdir / "http.db"
    data = payloads(campaign, 1000)
    bucket = campaign.time_bucket(time.time())

    def body(count: int) -> bytes:
        reports = [{"report_id": new_report_id(), "digest": campaign.digest,
                    "time": bucket, "payload": data[i % 1000]} for i in range(count)]
        return json.dumps({"reports": reports} if count > 1 else reports[0]).encode()

    def caught_up(storage: Storage) -> None:
        deadline = time.monotonic() + 120
        while storage.any_unfolded() and time.monotonic() < deadline:
            time.sleep(0.2)

    sections = (("batch_1000", batches, 1000), ("single", singles, 1))
    # Per round: (answers, elapsed wall seconds, server CPU seconds).
    runs: dict[str, dict[str, list[Any]]] = {label: {"ours": [], "bare": []}
                                             for label, _, _ in sections}
    port = free_port()
    bare = subprocess.Popen([sys.executable, str(Path(__file__).with_name("bare_server.py")),
                             "--bind", f"127.0.0.1:{port}", "--database",
                             str(workdir / "bare.db")], stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        with CollectorProcess(database, settings={"ADMIN_TOKEN": admin,
                                                  "LOG_LEVEL": "WARNING"}) as server:
            requests.post(f"{server.url}/v1/campaigns",
                          json={"name": "krr", "min_batch_size": 1, **SPECS["krr"]},
                          headers={"Authorization": f"Bearer {admin}"}, timeout=10)
            ours = int(server.url.rsplit(":", 1)[1])
            storage = SQLiteStorage(str(database))
            assert server.process is not None
            for label, count, size in sections:
                for _ in range(rounds):
                    bodies = [body(size) for _ in range(count)]
                    cpu = server_cpu_seconds(server.process.pid)
                    answers, elapsed = _load(ours, bodies, seconds)
                    for _, status, reply in answers:
                        if status == 200 and size > 1:
                            acked.update(r["report_id"] for r in json.loads(reply)["results"]
                                         if r["status"] in ("accepted", "duplicate"))
                        elif status in (200, 201):
                            acked.add(json.loads(reply)["report_id"])
                    sent += len(answers) * size
                    caught_up(storage)  # the fold's work is part of the round's CPU
                    runs[label]["ours"].append(
                        (answers, elapsed, server_cpu_seconds(server.process.pid) - cpu))
                    bodies = [body(size) for _ in range(count)]
                    cpu = server_cpu_seconds(bare.pid)
                    answers, elapsed = _load(port, bodies, seconds)
                    runs[label]["bare"].append(
                        (answers, elapsed, server_cpu_seconds(bare.pid) - cpu))
    finally:
        bare.terminate()
        bare.wait(timeout=30)

    out: dict[str, Any] = {}
    for label, _, size in sections:
        mine = _summary([a for answers, _, _ in runs[label]["ours"] for a in answers],
                        sum(elapsed for _, elapsed, _ in runs[label]["ours"]), size)
        baseline = _summary([a for answers, _, _ in runs[label]["bare"] for a in answers],
                            sum(elapsed for _, elapsed, _ in runs[label]["bare"]), size)
        mine["rounds"] = rounds
        mine["baseline_reports_per_s"] = baseline["reports_per_s"]
        mine["ratio_to_baseline"] = mine["reports_per_s"] / baseline["reports_per_s"]
        mine["round_reports_per_s"] = [len(a) * size / e for a, e, _ in runs[label]["ours"]]
        mine["round_baseline_reports_per_s"] = [len(b) * size / f
                                                for b, f, _ in runs[label]["bare"]]
        mine["round_ratios"] = [a / b for a, b in zip(mine["round_reports_per_s"],
                                                      mine["round_baseline_reports_per_s"],
                                                      strict=True)]
        # By CPU: reports per CPU-second of each server over its rounds (ours with the
        # fold's catch-up), whatever else the machine ran meanwhile.
        mine["cpu_seconds"] = sum(c for _, _, c in runs[label]["ours"])
        mine["baseline_cpu_seconds"] = sum(c for _, _, c in runs[label]["bare"])
        mine["reports_per_cpu_s"] = _per(mine["requests"] * size, mine["cpu_seconds"])
        mine["baseline_reports_per_cpu_s"] = _per(baseline["requests"] * size,
                                                  mine["baseline_cpu_seconds"])
        mine["cpu_ratio_to_baseline"] = _per(mine["reports_per_cpu_s"],
                                             mine["baseline_reports_per_cpu_s"])
        mine["round_cpu_ratios"] = [
            _per(_per(len(a), c), _per(len(b), d)) for (a, _, c), (b, _, d)
            in zip(runs[label]["ours"], runs[label]["bare"], strict=True)]
        out[label] = mine
    # The server's folders stop with it, a few seconds' reports behind: fold the rest as
    # `chorus aggregate` would, so that every stored report must be counted exactly once.
    fold(SQLiteStorage(str(database)))
    with sqlite3.connect(database) as conn:
        stored = [r[0] for r in conn.execute("SELECT lower(hex(report_id)) FROM reports")]
        counted = conn.execute("SELECT coalesce(sum(n), 0) FROM aggregates").fetchone()[0]
    out["integrity"] = {"sent": sent, "acknowledged": len(acked),
                        "lost": len(acked - set(stored)),
                        "duplicated": len(stored) - len(set(stored)),
                        "counted_minus_stored": counted - len(stored)}
    return out


def _wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the baseline server did not listen on port {port}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/results.json"))
    parser.add_argument("--only", choices=("http",),
                        help="run one stage only (its table, not the full one)")
    args = parser.parse_args(argv)
    quick = args.quick
    camps = campaigns()
    results: dict[str, Any] = {"quick": quick, "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory(prefix="chorus-bench-") as tmp:
        workdir = Path(tmp)
        stages: list[tuple[str, Callable[[], Any]]] = [
            ("client", lambda: bench_client(camps, 200 if quick else 20_000)),
            ("client_sdk", lambda: bench_client_sdk(camps, 200 if quick else 5_000, workdir)),
            ("aggregation", lambda: bench_aggregation(camps, 2_000 if quick else 200_000)),
            ("olh_support", lambda: bench_olh_support(5_000 if quick else 1_000_000)),
            ("ingest", lambda: bench_ingest(camps, 2_000 if quick else 50_000, workdir)),
            ("estimates", lambda: bench_estimates(camps, [100, 1_000] if quick
                                                  else [1_000, 100_000], workdir)),
            ("series", lambda: bench_series(camps["krr"], [1_000, 10_000] if quick
                                            else [10_000, 1_000_000], workdir)),
            # Even when quick, enough requests for the bare server's CPU to span clock ticks
            # (10 ms): 20 single reports took it less than one on a fast machine, read as 0.
            ("http", lambda: bench_http(camps, 10 if quick else 300, 200 if quick else 20_000,
                                        5 if quick else 20, workdir,
                                        rounds=1 if quick else 3)),
        ]
        if args.only:
            stages = [(key, stage) for key, stage in stages if key == args.only]
        for key, stage in staged(stages, "benchmarks/run.py"):
            results[key] = stage()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.only:
        print_http(results["http"])
    else:
        print_table(results)
    print(f"\nwritten to {args.out}")
    return results


def print_table(results: dict[str, Any]) -> None:
    print(f"{'mechanism':<10}{'client µs':>11}{'map rep/s':>13}{'ingest rep/s':>14}"
          f"{'vs bare SQLite':>16}{'estimate ms (small→large)':>28}")
    for name in SPECS:
        est = results["estimates"][name]
        sizes = [k for k in est if k.startswith("ms_at_")]  # folded
        print(f"{name:<10}{results['client'][name]['us_per_report']:>11.1f}"
              f"{results['aggregation'][name]['reports_per_s']:>13,.0f}"
              f"{results['ingest'][name]['reports_per_s']:>14,.0f}"
              f"{results['ingest'][name]['ratio_to_bare']:>16.2f}"
              f"{est[sizes[0]]:>16.2f} → {est[sizes[-1]]:.2f}")
    series = results["series"]
    sizes = [k.removeprefix("ms_at_") for k in series if k.startswith("ms_at_")]
    print(f"series of {series['buckets']} buckets (k-RR, d = {series['d']}): "
          + ", ".join(f"{series[f'ms_at_{n}']:.2f} ms at {int(n):,} reports "
                      f"({series[f'ratio_to_one_window_at_{n}']:.1f}× one window)"
                      for n in sizes)
          + f"; ratio largest/smallest {series['ratio_largest_to_smallest']:.2f}")
    sdk = results["client_sdk"]
    print("Client.report() p50 µs (in-memory state / on-disk state, fsync before each send, "
          "not per report): "
          + ", ".join(f"{name} {sdk[name]['report_p50_us_memory']:.0f} / "
                      f"{sdk[name]['report_p50_us_disk']:.0f}" for name in SPECS))
    print(f"import chorus_client: {sdk['import_ms']:.0f} ms beyond the interpreter's "
          f"{sdk['interpreter_start_ms']:.0f} ms")
    print(f"baselines: one CSPRNG draw {results['client']['baseline_us']:.2f} µs; "
          f"np.bincount {results['aggregation']['baseline_bincount_reports_per_s']:,.0f} rep/s")
    olh = results["olh_support"]
    print(f"OLH support counts, d = {olh['d']:,}, g = {olh['g']}, {olh['reports']:,} reports, "
          f"{olh['threads']} threads: {olh['reports_per_s']:,.0f} reports/s; bare numpy "
          f"((a·v + b) % P) % g in int64, no comparison or count, same threads: "
          f"{olh['bare_numpy_hash_reports_per_s']:,.0f} reports/s (ratio "
          f"{olh['ratio_to_bare_numpy_hash']:.1f}); one uint32 comparison per cell: "
          f"{olh['one_comparison_per_cell_reports_per_s']:,.0f} reports/s (ratio "
          f"{olh['ratio_to_one_comparison_per_cell']:.2f})")
    print_http(results["http"])


def print_http(http: dict[str, Any]) -> None:
    for label in ("batch_1000", "single"):
        row = http[label]
        print(f"HTTP {label:<11} {row['reports_per_s']:>10,.0f} reports/s "
              f"{row['requests_per_s']:>8,.0f} req/s  p50 {row['p50_ms']:.1f} ms  "
              f"p99 {row['p99_ms']:.1f} ms  ({row['requests']} requests, "
              f"{row['errors_5xx']} 5xx); bare Flask + SQLite "
              f"{row['baseline_reports_per_s']:,.0f} reports/s, ratio "
              f"{row['ratio_to_baseline']:.2f} (rounds "
              + ", ".join(f"{r:.2f}" for r in row["round_ratios"]) + ")")
    for label in ("batch_1000", "single"):
        row = http[label]
        print(f"HTTP {label:<11} by server CPU: {_figure(row['reports_per_cpu_s'], '>10,.0f')} "
              f"reports per CPU-second (fold included); bare "
              f"{_figure(row['baseline_reports_per_cpu_s'], ',.0f')}, "
              f"ratio {_figure(row['cpu_ratio_to_baseline'], '.2f')} (rounds "
              + ", ".join(_figure(r, ".2f") for r in row["round_cpu_ratios"]) + ")")
    check = http["integrity"]
    print(f"HTTP integrity: {check['acknowledged']} acknowledged of {check['sent']} sent, "
          f"{check['lost']} lost, {check['duplicated']} duplicated, statistics − stored = "
          f"{check['counted_minus_stored']}")


if __name__ == "__main__":
    main()
