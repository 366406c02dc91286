"""Every registered mechanism, end to end: created over the API, used by the real client,
corrected by the collector, queried with every post-processing its estimator offers.

Parametrized over the registry (through ``examples.EXAMPLES``), so a mechanism added later is
exercised the same way without new test code. In process (WSGI), no socket.
"""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections import Counter
from typing import Any

import pytest
from flask import Flask

from chorus_client import Client, CollectorAPI
from chorus_client.transport import WSGITransport
from chorus_collector.cli.formatting import format_estimates
from chorus_collector.estimators import estimator_for
from chorus_shared import REGISTRY
from helpers.examples import EXAMPLES
from helpers.support import ADMIN, ANALYST, FakeClock

USERS = 400
STRINGS = ["alpha", "beta", "gamma"]
BASE = "http://collector.test"


def _values(spec: dict[str, Any], rng: random.Random) -> list[Any]:
    domain = spec["domain"]
    if isinstance(domain, list):
        weights = [1 / (i + 1) for i in range(len(domain))]
        return rng.choices(domain, weights, k=USERS)
    if domain["kind"] == "strings":  # discovery campaigns hold short strings: "a", "b", "g"
        strings = [s[:domain.get("max_bytes", len(s))] for s in STRINGS]
        return rng.choices(strings, [3, 2, 1], k=USERS)
    if domain["kind"] == "vector":
        return [{a["name"]: a["lo"] + (a["hi"] - a["lo"]) * rng.random() ** 2
                 for a in domain["attributes"]} for _ in range(USERS)]
    if domain["kind"] == "record":
        return [{a["name"]: rng.choices(a["values"], [1 / (i + 1) for i in
                                                      range(len(a["values"]))])[0]
                 for a in domain["attributes"]} for _ in range(USERS)]
    lo, hi = domain["lo"], domain["hi"]
    return [lo + (hi - lo) * rng.random() ** 2 for _ in range(USERS)]


@pytest.mark.parametrize("mechanism", sorted(REGISTRY))
def test_mechanism_works_end_to_end(mechanism: str, make_app: Any, clock: FakeClock) -> None:
    app: Flask = make_app()
    transport = WSGITransport(app)
    spec = {"name": f"e2e-{mechanism}", "mechanism": mechanism, **EXAMPLES[mechanism][0],
            "min_batch_size": 1,
            "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    config = CollectorAPI(BASE, ADMIN, transport=transport).create_campaign(spec)
    rng = random.Random(zlib.crc32(mechanism.encode()))
    values = _values(spec, rng)
    noise = random.Random(5)

    # One client stands for many users: every report, cohort and hash seed is drawn afresh,
    # and the caps are lifted for the test.
    def new_client() -> Client:
        return Client(BASE, ephemeral=True, transport=transport,
                      campaigns={spec["name"]: config}, rng=noise, allow_insecure_rng=True,
                      lifetime_budget=math.inf, max_epsilon=math.inf, batch_size=200,
                      clock=clock, send_delay=0.0)

    # A discovery campaign's group is the install's for the whole period (keyed on its
    # state), so there every user is an install of their own.
    keyed = getattr(REGISTRY[mechanism], "keyed_assignment", False)
    clients = [new_client() for _ in range(USERS)] if keyed else [new_client()] * USERS
    assert {c.report(spec["name"], v) for c, v in zip(clients, values, strict=True)} \
        == {"queued"}
    for client in set(clients):
        client.flush()
    assert sum(client.totals.accepted for client in set(clients)) == USERS

    analyst = CollectorAPI(BASE, ANALYST, transport=transport)
    # Discovery campaigns (a strings domain with max_bytes) are asked their second stage: 400
    # reports over the tiny example's few cohorts are too few to walk (tests/e2e/
    # test_discovery_e2e.py covers discovery itself).
    domain = spec["domain"]
    candidates = [s[:domain.get("max_bytes", len(s))] for s in STRINGS] \
        if isinstance(domain, dict) and domain["kind"] == "strings" else []
    estimator = estimator_for(mechanism)
    for method in estimator.postprocessing:
        result = analyst.estimates(spec["name"], candidates=candidates, postprocessing=method)
        assert result["n"] == USERS
        assert result["mechanism"] == mechanism
        assert format_estimates(result).startswith(f"{spec['name']}: {mechanism}")
        if method != estimator.default_postprocessing:
            assert result["postprocessing"] != "none (unbiased)"
            continue
        if result["kind"] == "means":
            for row, attribute in zip(result["rows"], spec["domain"]["attributes"],
                                      strict=True):
                lo, hi, name = attribute["lo"], attribute["hi"], attribute["name"]
                assert row["attribute"] == name
                truth = sum(min(max(v[name], lo), hi) for v in values) / USERS
                assert abs(row["mean"] - truth) < 5 * row["std_error"], row
        elif result["kind"] == "distribution":
            lo, hi = spec["domain"]["lo"], spec["domain"]["hi"]
            edges = result["edges"]
            # Read from the histogram, the mean can be off by half a bucket on top of noise.
            half_bucket = max(b - a for a, b in itertools.pairwise(edges)) / 2
            truth = sum(min(max(v, lo), hi) for v in values) / USERS
            mean = result["mean"]
            if mean["std_error"] is None:  # sw states no error bars (its accuracy is held by
                # tests/mechanisms/test_sw_coverage.py): here it says why, and answers sanely
                assert result["extra"]["intervals"].startswith("none: "), result["extra"]
                assert abs(mean["value"] - truth) < 0.1 * (hi - lo), mean
            else:
                assert abs(mean["value"] - truth) < 5 * mean["std_error"] + half_bucket, mean
            assert len(result["histogram"]) == len(edges) - 1
            assert [q["q"] for q in result["quantiles"]] == [0.5, 0.95, 0.99]
        elif result["kind"] == "mean":
            lo, hi = spec["domain"]["lo"], spec["domain"]["hi"]
            truth = sum(min(max(v, lo), hi) for v in values) / USERS
            assert abs(result["mean"] - truth) < 5 * result["std_error"], result
        elif result["kind"] == "record":
            for marginal in result["marginals"]:
                name = marginal["attribute"]
                counts = Counter(v[name] for v in values)
                for row in marginal["rows"]:
                    truth = counts[row["value"]] / USERS
                    assert abs(row["frequency"] - truth) < 5 * row["std_error"] + 1e-9, row
        else:
            counts = Counter(values)
            for row in result["rows"]:
                truth = counts[row["value"]] / USERS
                assert abs(row["frequency"] - truth) < 5 * row["frequency_std_error"] + 1e-9, row
    csv = analyst.estimates_csv(spec["name"], candidates=candidates)
    assert csv.count("\n") >= 2
