"""End to end through the TypeScript client in Node: a real collector on 127.0.0.1, installs
reporting through ``Client.report`` with its ledger, outbox, random send delay and ``fetch``,
then a fold and estimates checked against the truth within 4 standard errors.

Each install stands for 25 users (its campaigns allow it 25 reports; the client draws fresh
noise for every report, so as far as the reports go it is one install per user, with far fewer
requests), as tests/e2e/test_end_to_end.py does for the Python client. The client's coins are
seeded per install (``seed``), so the run is reproducible; with 3,000 users the standard errors
are about 0.015 for a k-RR frequency and 2.5 for the mean, so a biased encoding (say values
mapped to the wrong category, or a mean off by a tenth of the range) fails by far.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers.client_ts import drive
from helpers.live import LiveCollector
from helpers.support import NOW

CATEGORIES = [f"choice-{i}" for i in range(8)]
USERS, PER_INSTALL = 3000, 25


@pytest.fixture
def live_config() -> dict[str, Any]:
    return {"FOLD_INTERVAL": 3600}


def _create(live: LiveCollector, spec: dict[str, Any]) -> dict[str, Any]:
    status, config = live.request("POST", "/v1/campaigns", token=live.admin_token, body=spec)
    assert status == 201, config
    return dict(config)


def test_node_installs_report_through_the_ts_client_and_estimates_hold(
        build: Path, live: LiveCollector, tmp_path: Path) -> None:
    policy = {"privacy": {"budget": 50.0, "max_reports": PER_INSTALL}}
    krr = _create(live, {"name": "ts-krr", "mechanism": "krr", "epsilon": 2.0,
                         "domain": CATEGORIES, **policy})
    mean = _create(live, {"name": "ts-mean", "mechanism": "duchi", "epsilon": 1.0,
                          "domain": {"kind": "numeric", "lo": 0, "hi": 100}, **policy})
    population = random.Random(42)
    users = [(population.choices(CATEGORIES, [8, 7, 6, 5, 4, 3, 2, 1])[0],
              population.uniform(0, 100) ** 1.0) for _ in range(USERS)]
    installs = [[pair for category, number in users[i:i + PER_INSTALL]
                 for pair in (["ts-krr", category], ["ts-mean", number])]
                for i in range(0, USERS, PER_INSTALL)]
    out = drive(build, tmp_path / "drive", {
        "url": live.url, "state": None, "now": NOW + 1234,
        # Shipped public configs, as an app pins them; the default send delay; a lifetime cap
        # far above what 25 users spend (each install stands for 25 users; no cap at all needs
        # a rolling window).
        "client": {"campaigns": {"ts-krr": krr, "ts-mean": mean}, "seed": 36,
                   "caps": {"lifetimeBudget": 1e6}},
        "steps": [
            # Made at NOW + 1234; flushed two hours later, when every report is due.
            {"op": "installs", "installs": installs, "flushAfter": 7200, "parallel": 8},
        ],
    })
    [result] = out["results"]
    assert result["outcomes"] == {"queued": 2 * USERS}
    assert result["flushed"] == {"accepted": 2 * USERS, "duplicate": 0, "rejected": 0,
                                 "pending": 0}
    live.fold()

    frequencies = live.get_json("/v1/campaigns/ts-krr/estimates")
    assert frequencies["n"] == USERS
    truth = Counter(category for category, _ in users)
    for row in frequencies["rows"]:
        assert abs(row["frequency"] - truth[row["value"]] / USERS) <= 4 * row[
            "frequency_std_error"], row
    average = live.get_json("/v1/campaigns/ts-mean/estimates")
    assert average["n"] == USERS
    true_mean = sum(number for _, number in users) / USERS
    assert abs(average["mean"] - true_mean) <= 4 * average["std_error"]
    # A negative control at the same tolerance: the truth of a reversed population is refused.
    reversed_truth = truth[CATEGORIES[-1]] / USERS
    first = next(row for row in frequencies["rows"] if row["value"] == CATEGORIES[0])
    assert abs(first["frequency"] - reversed_truth) > 4 * first["frequency_std_error"]
