"""Apple's CMS and HCMS (MECHANISMS.md §7.3), through the real randomizer and estimator.

With the campaign's fixed public hashes, E[ĉ(v)]/n = m/(m − 1)·(mean_u π_u − 1/m), where π_u is
the share of hash rows in which u's value lands on v's cell (1 for v itself); averaged over
hash draws (π_u = 1/m for other values) this is f_v. The exact fixed-population variance is
(m/(m − 1))²·Σ_u Var_u/n² with Var_u = (c² − 1)/4 + π_u(1 − π_u) (CMS) or c² − π_u² (HCMS).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.estimators import Query
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import CountMeanSketch, HadamardCountMeanSketch
from helpers.examples import example_campaigns
from helpers.statcheck import assert_unbiased_with_exact_variance, frequency_values, run_repetitions
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, make_report

CANDIDATES = ["apple", "banana", "cherry", "damson"]
COUNTS = [150, 90, 40, 20]
SKETCHES = [c for c in example_campaigns() if c.mechanism.name in ("cms", "hcms")]


@pytest.mark.parametrize("campaign", SKETCHES, ids=lambda c: c.name)
def test_sketch_estimates_match_the_exact_fixed_hash_expectation_and_variance(
        campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    assert isinstance(mechanism, CountMeanSketch)
    k, m, c = mechanism.k, mechanism.m, mechanism.c
    inputs = [v for v, count in zip(CANDIDATES, COUNTS, strict=True) for _ in range(count)]
    n = len(inputs)
    cells = {v: [mechanism.position(v, j) for j in range(k)] for v in CANDIDATES}

    def share(x: str, v: str) -> float:
        return sum(a == b for a, b in zip(cells[x], cells[v], strict=True)) / k

    factor = m / (m - 1)
    expected, exact = [], []
    for v in CANDIDATES:
        pis = np.array([share(x, v) for x in inputs])
        expected.append(factor * (pis.mean() - 1 / m))
        per_report = c**2 - pis**2 if isinstance(mechanism, HadamardCountMeanSketch) \
            else (c**2 - 1) / 4 + pis * (1 - pis)
        exact.append(factor**2 * per_report.sum() / n**2)
    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, 800,
                                   Query(candidates=tuple(CANDIDATES)), frequency_values)
    assert_unbiased_with_exact_variance(estimates, np.array(expected), np.array(exact))


def test_hcms_needs_a_power_of_two_width() -> None:
    from chorus_shared import campaign_from_spec
    from chorus_shared.errors import CampaignError

    with pytest.raises(CampaignError, match="power of two"):
        campaign_from_spec({"name": "h", "mechanism": "hcms", "epsilon": 1.0,
                            "domain": {"kind": "strings"}, "params": {"m": 1000}})


def test_sketch_estimates_need_candidates(make_app: Any) -> None:
    from chorus_collector.estimators import QueryError, estimator_for

    campaign = SKETCHES[0]
    estimator = estimator_for(campaign.mechanism.name)
    state = np.zeros(estimator.state_size(campaign.mechanism), dtype=np.int64)
    with pytest.raises(QueryError, match="candidate"):
        estimator.finalize(campaign, 0, state, Query())


def test_sketch_queries_and_parameters_are_bounded(http: FlaskClient) -> None:
    with pytest.raises(CampaignError, match="hash functions"):
        campaign_from_spec({"name": "c", "mechanism": "cms", "epsilon": 1.0,
                            "domain": {"kind": "strings"}, "params": {"k": 1 << 19, "m": 2}})
    spec = {"name": "c", "mechanism": "hcms", "epsilon": 1.0, "min_batch_size": 1,
            "domain": {"kind": "strings"}, "params": {"k": 4096, "m": 2}}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(1)
    http.post("/v1/reports", json={"reports": [make_report(config, "x", rng)
                                               for _ in range(20)]})
    candidates = [f"c{i}" for i in range(1000)]
    reply = http.post("/v1/campaigns/c/estimates", json={"candidates": candidates},
                      headers=ANALYST_HEADERS)
    assert reply.status_code == 422 and reply.get_json()["type"].endswith("query-too-large")
    small = http.post("/v1/campaigns/c/estimates", json={"candidates": ["x", "y"]},
                      headers=ANALYST_HEADERS)
    assert small.status_code == 200
