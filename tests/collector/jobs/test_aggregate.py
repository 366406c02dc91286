"""Batch recomputation of the statistics from raw reports, on a process pool, equals the
statistics folded from the appended reports (map / merge: order and chunking free)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask

from chorus_collector.cli import main as cli
from chorus_collector.jobs.aggregate import check_aggregates, recompute
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import open_storage
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, FakeClock, make_report, query

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
def filled(make_app: Any, clock: FakeClock, database: str) -> str:
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
    assert fold(open_storage(database), limit=97) == 4 * 3 * 130
    return database


@pytest.mark.parametrize("workers", [1, 2])
def test_recomputed_statistics_equal_the_incremental_ones(filled: str, workers: int) -> None:
    storage = open_storage(filled)
    for spec in SPECS:
        checks = check_aggregates(storage, spec["name"], workers=workers, chunk=37)
        assert len(checks) == 3
        assert all(c.matches and c.stored_n == c.recomputed_n == 130 for c in checks)
    buckets = recompute(storage, "k", workers=workers, chunk=1000)
    assert sum(n for n, _ in buckets.values()) == 390


def test_a_corrupted_statistic_is_reported_and_fails_the_cli(filled: str) -> None:
    query(filled, "UPDATE aggregates SET n = n + 1 WHERE time = (SELECT MIN(time) FROM "
                  "aggregates) AND campaign_id = (SELECT id FROM campaigns WHERE name = 'o')")
    runner = CliRunner()
    bad = runner.invoke(cli, ["check-aggregates", "o", "--database", filled,
                              "--workers", "2"])
    assert bad.exit_code == 1 and "statistics differ" in bad.output, bad.output
    good = runner.invoke(cli, ["check-aggregates", "k", "--database", filled])
    assert good.exit_code == 0 and "match the raw reports" in good.output, good.output
    missing = runner.invoke(cli, ["check-aggregates", "nope", "--database", filled])
    assert missing.exit_code != 0 and "no campaign" in missing.output


def test_buckets_dropped_by_gc_are_counted_not_miscounted(filled: str,
                                                          clock: FakeClock) -> None:
    storage = open_storage(filled)
    oldest = clock.now - 2 * 3600
    expiry = storage.get_campaign("r").campaign.report_expiry  # type: ignore[union-attr]
    # Just past the oldest bucket's expiry (plus a margin of one hour): only it goes.
    dropped = storage.drop_expired(oldest - oldest % 3600 + expiry + 3600 + 1, margin=3600)
    assert dropped == 4 * 130  # the oldest bucket of each of the four campaigns
    checks = check_aggregates(storage, "r", workers=1)
    assert [(c.stored_n, c.recomputed_n, c.retired) for c in checks] == [
        (130, 0, 130), (130, 130, 0), (130, 130, 0)]
    assert all(c.matches for c in checks)
    result = CliRunner().invoke(cli, ["check-aggregates", "r", "--database", filled])
    assert result.exit_code == 0, result.output
    assert "1 bucket lost expired reports to gc" in result.output
    # A retired count that does not add up is a mismatch like any other.
    query(filled, "UPDATE retired SET reports = reports - 1")
    assert not check_aggregates(storage, "r", workers=1)[0].matches


def test_gc_drops_only_folded_reports(make_app: Any, clock: FakeClock, database: str) -> None:
    app: Flask = make_app()
    http = app.test_client()
    config = http.post("/v1/campaigns", json={**SPECS[0], "min_batch_size": 1},
                       headers=ADMIN_HEADERS).get_json()
    rng = random.Random(5)
    reports = [make_report(config, "a", rng) for _ in range(20)]
    assert http.post("/v1/reports", json={"reports": reports}).get_json()["accepted"] == 20
    storage = open_storage(database)
    far_future = clock.now + 10 * 365 * 86400
    assert storage.drop_expired(far_future, margin=0) == 0  # not folded: they fed nothing yet
    fold(storage, limit=7)
    assert storage.drop_expired(far_future, margin=0) == 20
    assert storage.folded_statistics(1).retired == {reports[0]["time"]: 20}
    estimate = http.get("/v1/campaigns/k/estimates", headers=ANALYST_HEADERS).get_json()
    assert estimate["n"] == 20  # the statistics they fed stay
