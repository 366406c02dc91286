"""Discovery end to end over HTTP: a collector on loopback, a PEM campaign created over the
API, 3,000 reports (2,700 simulated in the wire format and posted in batches, 300 from real
``Client`` installs, each its own keyed group), then the analyst's three questions: what is
frequent (no candidates: the walk), how frequent are these (the second stage), and what was
frequent in one window."""

from __future__ import annotations

import random
import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flask import Flask

from chorus_client import Client, CollectorAPI
from chorus_shared import campaign_from_config
from chorus_shared.mechanisms import PEM
from helpers.live import categorical, seed_campaign, serving
from helpers.support import ANALYST, FakeClock

pytestmark = pytest.mark.slow

HOUR = 3600
#: An hour ago "legacy" was frequent; now "search" has taken its place.
BEFORE = {"home": 0.30, "legacy": 0.25, "news": 0.12, "mail": 0.08}
NOW = {"home": 0.30, "search": 0.25, "news": 0.12, "mail": 0.08}
RARE = [f"r{i:03d}" for i in range(100)]  # the remaining 25%, 0.25% each


def shares(heavy: dict[str, float]) -> tuple[list[str], list[float]]:
    rest = (1 - sum(heavy.values())) / len(RARE)
    return [*heavy, *RARE], [*heavy.values(), *[rest] * len(RARE)]


SPEC: dict[str, Any] = {
    "name": "pages", "mechanism": "pem", "epsilon": 4.0,
    "domain": {"kind": "strings", "max_bytes": 6}, "params": {"top": 8},
    "time_precision": HOUR, "min_batch_size": 100,
    "description": "Which page did you open first today? (PEM discovery)"}


def test_discovery_over_http_finds_re_estimates_and_windows(
        make_app: Callable[..., Flask], clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(16)
    # Seeded install keys (each client draws its own from the OS) and coins: reproducible.
    monkeypatch.setattr(secrets, "token_bytes", random.Random(18).randbytes)
    with serving(make_app(FOLD_INTERVAL=1), clock) as live:
        seeded = seed_campaign(live, SPEC, [categorical(*shares(BEFORE)),
                                            categorical(*shares(NOW))], 1350, rng)
        assert seeded.accepted == 2700
        before, current = seeded.buckets
        assert current - before == HOUR
        config = campaign_from_config(seeded.config)
        assert isinstance(config.mechanism, PEM)
        groups = config.mechanism.groups
        assert groups == 6  # 16, 24, 32, 40, 48 bits, and the estimation group

        # 300 installs, each a real client (its own install key, so its own group), one
        # report each over HTTP, this hour.
        names, weights = shares(NOW)
        draw = random.Random(17)
        values = draw.choices(names, weights, k=300)
        seen_groups: Counter[int] = Counter()
        for i, value in enumerate(values):
            client = Client(live.url, ephemeral=True, campaigns={"pages": seeded.config},
                            send_delay=0.0, max_epsilon=4.0, clock=clock, timeout=10.0,
                            rng=random.Random(i), allow_insecure_rng=True)
            assert client.report("pages", value) == "queued"
            seen_groups[client._assignment(config, clock())["group"]] += 1
            assert client.flush().accepted == 1
            client.close()
        assert len(seen_groups) == groups  # the installs spread over every group
        live.fold()

        # What is frequent: GET with no candidates runs the walk.
        found = live.get_json("/v1/campaigns/pages/estimates")
        assert found["n"] == 3000 and found["kind"] == "frequency"
        info = found["extra"]["discovery"]
        assert info["stage"] == "discovery" and info["algorithm"] == "pem"
        assert [s["prefix_bits"] for s in info["steps"]] == [16, 24, 32, 40, 48]
        assert sum(s["reports"] for s in info["steps"]) + info["final_reports"] == 3000
        rows = {r["value"]: r for r in found["rows"]}
        print({v: (round(r["frequency"], 3), round(r["frequency_std_error"], 3),
                   r["detected"]) for v, r in rows.items()})
        assert len(found["rows"]) <= 8
        truth = {v: (1350 * (BEFORE.get(v, 0) + NOW.get(v, 0))
                     + values.count(v)) / 3000 for v in {*BEFORE, *NOW}}
        for value in ("home", "legacy", "search", "news"):  # 8 SEs and more
            assert rows[value]["detected"], value
            assert abs(rows[value]["frequency"] - truth[value]) \
                <= 4 * rows[value]["frequency_std_error"], value
        assert not any(r["detected"] for v, r in rows.items() if v not in truth)

        # The second stage: the analyst's own list, answered in full, flags included; the
        # client library's POST and a GET with candidate=… give the same answer.
        listed = ["home", "search", "mail", "nobody"]
        again = CollectorAPI(live.url, ANALYST).estimates("pages", candidates=listed)
        query = "&".join(f"candidate={v}" for v in listed)
        assert live.get_json(f"/v1/campaigns/pages/estimates?{query}")["rows"] == again["rows"]
        assert again["extra"]["discovery"]["stage"] == "re-estimate"
        assert sorted(r["value"] for r in again["rows"]) == sorted(listed)
        by_value = {r["value"]: r for r in again["rows"]}
        assert by_value["home"]["detected"] and by_value["search"]["detected"]
        assert not by_value["nobody"]["detected"]
        for value in listed:
            row = by_value[value]
            assert abs(row["frequency"] - truth.get(value, 0.0)) <= 4 * row[
                "frequency_std_error"], value

        # One window: the hour before, when "legacy" was frequent and "search" unheard of.
        window = live.get_json(f"/v1/campaigns/pages/estimates?start={before}&end={current}")
        assert window["n"] == 1350 and window["window"] == {"start": before, "end": current}
        early = {r["value"]: r for r in window["rows"]}
        assert early["legacy"]["detected"] and early["home"]["detected"]
        assert "search" not in early or not early["search"]["detected"]
        steps = window["extra"]["discovery"]
        assert sum(s["reports"] for s in steps["steps"]) + steps["final_reports"] == 1350
