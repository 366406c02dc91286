"""Batch recomputation of the statistics from raw reports, on a process pool, equals the
incremental statistics the collector keeps at ingest (map / merge: order and chunking free)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from chorus_collector.aggregate import check_aggregates, recompute
from chorus_collector.cli import main as cli
from chorus_collector.storage import Storage
from helpers.support import ADMIN_HEADERS, FakeClock, make_report

SPECS: list[dict[str, Any]] = [
    {"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"]},
    {"name": "o", "mechanism": "olh", "epsilon": 2.0, "domain": [f"v{i}" for i in range(40)]},
    {"name": "r", "mechanism": "rappor", "epsilon": 3.0, "domain": {"kind": "strings"},
     "params": {"k": 16, "h": 2, "m": 4}},
    {"name": "v", "mechanism": "hm_md", "epsilon": 6.0, "domain": {"kind": "vector",
     "attributes": [{"name": "x", "lo": 0, "hi": 1}, {"name": "y", "lo": 0, "hi": 9}]}},
]
VALUES = {"k": lambda r: r.choice("abc"), "o": lambda r: f"v{r.randrange(40)}",
          "r": lambda r: f"s{r.randrange(6)}", "v": lambda r: [r.random(), 9 * r.random()]}


@pytest.fixture
def filled(make_app: Any, clock: FakeClock, db_path: Path) -> Path:
    app: Flask = make_app()
    http = app.test_client()
    rng = random.Random(4)
    for spec in SPECS:
        config = http.post("/v1/campaigns", json={**spec, "min_batch_size": 1},
                           headers=ADMIN_HEADERS).get_json()
        for hour in range(3):  # three time buckets
            reports = [make_report(config, VALUES[spec["name"]](rng), rng,
                                   now=clock.now - 3600 * hour) for _ in range(130)]
            reply = http.post("/v1/reports", json={"reports": reports})
            assert reply.get_json()["accepted"] == 130, reply.get_json()
    return db_path


@pytest.mark.parametrize("workers", [1, 2])
def test_recomputed_statistics_equal_the_incremental_ones(filled: Path, workers: int) -> None:
    storage = Storage(str(filled))
    for spec in SPECS:
        checks = check_aggregates(storage, spec["name"], workers=workers, chunk=37)
        assert len(checks) == 3
        assert all(c.matches and c.stored_n == c.recomputed_n == 130 for c in checks)
    buckets, skipped = recompute(storage, "k", workers=workers, chunk=1000)
    assert sum(n for n, _ in buckets.values()) == 390 and not any(skipped.values())


def test_a_corrupted_statistic_is_reported_and_fails_the_cli(filled: Path) -> None:
    with sqlite3.connect(filled) as conn:
        conn.execute("UPDATE aggregates SET n = n + 1 WHERE time = (SELECT MIN(time) FROM "
                     "aggregates) AND campaign_id = (SELECT id FROM campaigns WHERE name = 'o')")
    runner = CliRunner()
    bad = runner.invoke(cli, ["check-aggregates", "o", "--database", str(filled),
                              "--workers", "2"])
    assert bad.exit_code == 1 and "statistics differ" in bad.output, bad.output
    good = runner.invoke(cli, ["check-aggregates", "k", "--database", str(filled)])
    assert good.exit_code == 0 and "match the raw reports" in good.output, good.output
    missing = runner.invoke(cli, ["check-aggregates", "nope", "--database", str(filled)])
    assert missing.exit_code != 0 and "no campaign" in missing.output


def test_expired_payloads_are_skipped_not_miscounted(filled: Path) -> None:
    with sqlite3.connect(filled) as conn:
        conn.execute("UPDATE reports SET payload = '' WHERE time = (SELECT MIN(time) FROM "
                     "reports)")
    checks = check_aggregates(Storage(str(filled)), "r", workers=1)
    assert [c.scrubbed for c in checks] == [130, 0, 0]
    assert [c.matches for c in checks] == [False, True, True]
    result = CliRunner().invoke(cli, ["check-aggregates", "r", "--database", str(filled)])
    assert result.exit_code == 0 and "1 buckets hold expired payloads" in result.output
