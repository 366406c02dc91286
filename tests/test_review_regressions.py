"""Regressions for defects a review found in the mechanism catalogue (each would have been a
500, lost reports, a hang or a NaN)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.estimators.consistency import composite_mle
from chorus_shared import campaign_from_spec
from chorus_shared.errors import CampaignError
from support import ADMIN_HEADERS, ANALYST_HEADERS, make_report


def _vector(d: int) -> dict[str, Any]:
    return {"kind": "vector", "attributes": [{"name": f"a{i}", "lo": 0, "hi": 1}
                                            for i in range(d)]}


def test_duchi_md_masks_always_fit_the_wire(http: FlaskClient) -> None:
    """A 64-bit mask can need 20 digits, which the collector refuses: D is capped at 63, and
    the largest 63-bit mask is accepted."""
    with pytest.raises(CampaignError, match="at most 63"):
        campaign_from_spec({"name": "v", "mechanism": "duchi_md", "epsilon": 1.0,
                            "domain": _vector(64)})
    spec = {"name": "v", "mechanism": "duchi_md", "epsilon": 1.0, "domain": _vector(63),
            "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    report = make_report(config, [0.5] * 63, random.Random(0), payload=(1 << 63) - 1)
    assert http.post("/v1/reports", json={"reports": [report]}).get_json()["accepted"] == 1


def test_dbitflip_at_large_epsilon_is_created_and_listed(http: FlaskClient) -> None:
    spec = {"name": "d", "mechanism": "dbitflip", "epsilon": 40.0, "domain": ["a", "b", "c"]}
    assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    assert http.get("/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200
    assert http.get("/v1/campaigns/d").status_code == 200


@pytest.mark.parametrize("mechanism", ["shist", "hr", "dbitflip", "harmony", "pm_md", "cms",
                                       "one_bit_mean", "laplace"])
def test_epsilon_too_small_to_be_useful_is_a_clear_400(http: FlaskClient,
                                                      mechanism: str) -> None:
    domains = {"harmony": _vector(2), "pm_md": _vector(2), "cms": {"kind": "strings"},
               "one_bit_mean": {"kind": "numeric", "lo": 0, "hi": 1},
               "laplace": {"kind": "numeric", "lo": 0, "hi": 1}}
    spec = {"name": "tiny", "mechanism": mechanism, "epsilon": 1e-17,
            "domain": domains.get(mechanism, ["a", "b", "c"])}
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 400 and "below" in reply.get_json()["detail"]
    assert http.get("/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200


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


def test_composite_mle_is_defined_on_empty_and_sparse_counts() -> None:
    assert composite_mle(np.zeros(4), 10, 0.75, 0.25).tolist() == [0.25] * 4
    pi = composite_mle(np.array([0, 0, 0, 0, 1.0]), 10, 0.75, 0.25)
    assert np.all(np.isfinite(pi)) and pi.sum() == pytest.approx(1.0) and pi.min() >= 0


def test_olh_parameters_at_large_epsilon_are_computed_quickly() -> None:
    """The collision probability used to build a list of e^ε sizes (18 s at ε = 18)."""
    from chorus_shared.mechanisms.local_hashing import PRIME, collision_probability

    campaign = campaign_from_spec({"name": "o", "mechanism": "olh", "epsilon": 13.0,
                                   "domain": ["a", "b", "c"]}, warn=False)
    assert campaign.mechanism.g > 400_000  # type: ignore[attr-defined]
    sizes = [(PRIME - r + 6 - 1) // 6 for r in range(6)]
    exact = sum(n * (n - 1) for n in sizes) / (PRIME * (PRIME - 1))
    assert collision_probability(PRIME, 6) == pytest.approx(exact, rel=1e-15)
    assert math.isfinite(collision_probability(PRIME, 1 << 20))
