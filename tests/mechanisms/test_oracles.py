"""SUE, OUE, Subset Selection and Hadamard Response: the parts the registry-wide tests do not
reach (parameter choice, the Walsh–Hadamard decoder, peer bugs, the API)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.estimators.common import walsh_hadamard
from chorus_shared import campaign_from_spec
from chorus_shared.mechanisms import OUE, HadamardResponse, SubsetSelection
from chorus_shared.mechanisms.hadamard import in_block
from chorus_shared.mechanisms.subset import best_omega, subset_support_probabilities
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, make_report, z_threshold


def _var(d: int, omega: int, eps: float) -> float:
    p, q = subset_support_probabilities(d, omega, eps)
    return q * (1 - q) / (p - q) ** 2


@pytest.mark.parametrize(("d", "eps", "omega", "variance"), [
    (10, 1.0, 2, 2.82), (10, 2.0, 1, 0.377), (100, 1.0, 27, 3.59), (100, 4.0, 1, 0.0531),
    (1000, 2.0, 119, 0.721),
])
def test_subset_size_minimises_the_exact_variance(d: int, eps: float, omega: int,
                                                  variance: float) -> None:
    """MECHANISMS.md §12.2's table; a scan, not the rounded d/(e^ε + 1)."""
    assert best_omega(d, eps) == omega
    assert _var(d, omega, eps) == pytest.approx(variance, rel=5e-3)
    assert all(_var(d, w, eps) >= _var(d, omega, eps) for w in range(1, d))


def test_walsh_hadamard_matches_the_matrix() -> None:
    for size in (2, 4, 8, 32):
        matrix = np.array([[(-1) ** bin(i & j).count("1") for j in range(size)]
                           for i in range(size)])
        values = np.random.default_rng(size).integers(0, 50, size)
        assert np.allclose(walsh_hadamard(values), matrix @ values)


def test_hadamard_blocks_are_half_and_pairwise_a_quarter() -> None:
    mechanism = campaign_from_spec({"name": "h", "mechanism": "hr", "epsilon": 1.0,
                                    "domain": [f"v{i}" for i in range(13)]}).mechanism
    assert isinstance(mechanism, HadamardResponse)
    assert mechanism.size == 16
    blocks = [{y for y in range(16) if in_block(x, y)} for x in range(13)]
    assert all(len(b) == 8 for b in blocks)
    assert all(len(a & b) == 4 for i, a in enumerate(blocks) for b in blocks[i + 1:])


def test_unary_true_bit_is_reported_with_p_exactly() -> None:
    """pure-LDP #11: the true bit was pre-noised with q, reported 1 with p + (1 − p)q."""
    mechanism = campaign_from_spec({"name": "u", "mechanism": "oue", "epsilon": 0.5,
                                    "domain": ["a", "b", "c"]}).mechanism
    assert isinstance(mechanism, OUE)
    rng = random.Random(2)
    draws = 60_000
    ones = sum(int(mechanism.randomize(0, rng)["bits"], 16) & 1 for _ in range(draws))
    p = mechanism.p
    assert abs(ones - draws * p) < z_threshold(1e-6) * (draws * p * (1 - p)) ** 0.5
    wrong = p + (1 - p) * mechanism.q
    assert abs(ones - draws * wrong) > z_threshold(1e-6) * (draws * p * (1 - p)) ** 0.5


def test_subset_reports_are_distinct_sorted_and_of_size_omega() -> None:
    mechanism = campaign_from_spec({"name": "s", "mechanism": "ss", "epsilon": 1.0,
                                    "domain": [f"v{i}" for i in range(30)]}).mechanism
    assert isinstance(mechanism, SubsetSelection)
    rng = random.Random(4)
    for x in range(30):
        report = mechanism.randomize(x, rng)
        assert report == sorted(set(report))
        assert len(report) == mechanism.omega
        assert mechanism.check_payload(report) == report


@pytest.mark.parametrize(("mechanism", "value", "bad"), [
    ("sue", "a", {"bits": "zz"}), ("oue", "b", {"bits": "10"}), ("ss", "v1", [3, 1]),
    ("ss", "v1", [1, 1]), ("hr", "v2", 64), ("hr", "v2", -1),
    ("dbitflip", "v3", {"buckets": [1], "bits": [2]}),
    ("dbitflip", "v3", {"buckets": [20], "bits": [1]}),
])
def test_new_oracles_end_to_end_through_the_api(http: FlaskClient, mechanism: str,
                                                value: str, bad: object) -> None:
    domain = ["a", "b", "c", "d"] if mechanism in ("sue", "oue") else [
        f"v{i}" for i in range(20)]
    spec = {"name": "o", "mechanism": mechanism, "epsilon": 2.0, "domain": domain,
            "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(1)
    reports = [make_report(config, value, rng) for _ in range(3000)]
    assert http.post("/v1/reports", json={"reports": reports}).get_json()["accepted"] == 3000
    rejected = http.post("/v1/reports", json=make_report(config, value, rng, payload=bad))
    assert rejected.status_code == 400
    body = http.get("/v1/campaigns/o/estimates", headers=ANALYST_HEADERS).get_json()
    row = next(r for r in body["rows"] if r["value"] == value)
    assert abs(row["frequency"] - 1.0) < 4.5 * row["frequency_std_error"]
    others = [r for r in body["rows"] if r["value"] != value]
    assert all(abs(r["frequency"]) < 4.5 * r["frequency_std_error"] for r in others)


@pytest.mark.parametrize(("d", "eps", "limit", "expected"), [
    (10, 1.0, None, "ss"), (10, 2.0, None, "krr"), (100, 1.0, None, "ss"),
    (100, 4.0, None, "krr"), (1000, 2.0, None, "ss"), (1000, 2.0, 16, "hr"),
    (10, 2.0, 4, "krr"), (3000, 1.0, None, "ss"), (5000, 1.0, None, "olh"),
])
def test_auto_picks_the_least_exact_variance(d: int, eps: float, limit: int | None,
                                             expected: str) -> None:
    from chorus_shared import campaign_from_config

    params = {"max_report_bits": limit} if limit else {}
    campaign = campaign_from_spec({"name": "a", "mechanism": "auto", "epsilon": eps,
                                   "domain": [f"v{i}" for i in range(d)], "params": params})
    assert campaign.mechanism.name == expected
    selection = campaign.config["selection"]
    table = selection["candidates"]
    eligible = {n: r for n, r in table.items() if limit is None or r["report_bits"] <= limit}
    best = min(r["variance_per_user"] for r in eligible.values())
    assert table[expected]["variance_per_user"] == pytest.approx(best, rel=1e-9)
    assert expected in selection["reason"]
    assert campaign_from_config(campaign.public_config()).digest == campaign.digest


def test_auto_refuses_what_it_cannot_serve() -> None:
    from chorus_shared import CampaignError

    with pytest.raises(CampaignError, match="categories domain"):
        campaign_from_spec({"name": "a", "mechanism": "auto", "epsilon": 1.0,
                            "domain": {"kind": "numeric", "lo": 0, "hi": 1}})
    with pytest.raises(CampaignError, match="reports in at most 1 bits"):
        campaign_from_spec({"name": "a", "mechanism": "auto", "epsilon": 1.0,
                            "domain": [f"v{i}" for i in range(10)],
                            "params": {"max_report_bits": 1}})


def test_auto_through_the_api(http: FlaskClient) -> None:
    reply = http.post("/v1/campaigns", headers=ADMIN_HEADERS, json={
        "name": "auto", "mechanism": "auto", "epsilon": 1.0,
        "domain": [f"v{i}" for i in range(50)]})
    assert reply.status_code == 201
    body = reply.get_json()
    assert body["mechanism"] == "ss"
    assert body["selection"]["from"] == "auto"
    assert http.get("/v1/campaigns/auto").get_json()["digest"] == body["digest"]


def test_olh_chooses_g_by_exact_variance_and_uses_it_for_p() -> None:
    """e^(ln 3) = 3.0000000000000004: a naive ⌈e^ε⌉ + 1 gives 5; the variance scan gives 4.
    And p is computed from the g actually used (mpc4j's server used p* = 1/2, q* = 1/(e^ε+1)
    whatever g its client rounded to)."""
    import math

    from chorus_shared.mechanisms import OLH

    campaign = campaign_from_spec({"name": "o", "mechanism": "olh",
                                   "epsilon": math.log(3), "domain": ["a", "b", "c"]})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, OLH)
    assert mechanism.g == 4
    loose = campaign_from_spec({"name": "o", "mechanism": "olh", "epsilon": 1.3,
                                "domain": ["a", "b", "c"]}).mechanism
    assert isinstance(loose, OLH)
    assert loose.g in (4, 5)
    assert loose.p == pytest.approx(math.exp(1.3) / (math.exp(1.3) + loose.g - 1))
    assert loose.p != pytest.approx(0.5)


@pytest.mark.parametrize(("prime", "g", "workers"), [
    (2_147_483_647, 5, 1), (2_147_483_647, 4, 1), (2_147_483_647, 4, 2),
    (2_147_483_647, 2, 3), (7919, 5, 1), (7919, 8, 2)])
def test_vectorized_support_counts_match_a_direct_count(prime: int, g: int,
                                                        workers: int) -> None:
    """The Mersenne-reduction and power-of-two fast paths, threads included, must count
    exactly what the client's pure-Python hash computes, extreme seeds included."""
    from chorus_collector.estimators.local_hashing import support_counts
    from chorus_shared.mechanisms.local_hashing import local_hash

    rng = np.random.default_rng(9)
    a = rng.integers(1, prime, size=500)
    b = rng.integers(0, prime, size=500)
    a[:3], b[:3] = prime - 1, [prime - 1, 0, prime - 2]
    y = rng.integers(0, g, size=500)
    d = 37 if prime > 10**6 else 1000
    values = list(range(d - 37, d))
    direct = [sum(local_hash(int(ai), int(bi), v, prime, g) == yi for ai, bi, yi in
                  zip(a, b, y, strict=True)) for v in values]
    counts = support_counts(a, b, y, d, prime, g, block_cells=100 * d, workers=workers)
    assert counts[d - 37:].tolist() == direct


def test_olh_end_to_end_with_the_default_family(http: FlaskClient) -> None:
    spec = {"name": "olh", "mechanism": "olh", "epsilon": 2.0, "min_batch_size": 1,
            "domain": [f"v{i}" for i in range(64)]}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    assert config["params"]["prime"] == 2_147_483_647
    rng = random.Random(5)
    values = [f"v{i % 4}" for i in range(4000)]
    reports = [make_report(config, v, rng) for v in values]
    assert http.post("/v1/reports", json={"reports": reports}).get_json()["accepted"] == 4000
    body = http.get("/v1/campaigns/olh/estimates", headers=ANALYST_HEADERS).get_json()
    z = z_threshold(1e-6, 64)
    for row in body["rows"]:
        truth = 0.25 if row["value"] in ("v0", "v1", "v2", "v3") else 0.0
        assert abs(row["frequency"] - truth) < z * row["frequency_std_error"]


def test_piecewise_mechanism_through_the_api(http: FlaskClient) -> None:
    spec = {"name": "pm", "mechanism": "pm", "epsilon": 3.0, "min_batch_size": 1,
            "domain": {"kind": "numeric", "lo": 0, "hi": 100}}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    assert config["params"]["resolution"] == 65536
    rng = random.Random(8)
    values = [10.0 + 80.0 * (i % 7) / 6 for i in range(3000)] + [150.0] * 30  # clipped
    reports = [make_report(config, v, rng) for v in values]
    assert all(isinstance(r["payload"], int) for r in reports)  # no float on the wire
    assert http.post("/v1/reports", json={"reports": reports}).get_json()["accepted"] == 3030
    assert http.post("/v1/reports", json=make_report(config, 1.0, rng, payload=0.5)
                     ).status_code == 400
    body = http.get("/v1/campaigns/pm/estimates", headers=ANALYST_HEADERS).get_json()
    truth = (sum(values[:3000]) + 30 * 100.0) / 3030
    assert abs(body["mean"] - truth) < z_threshold(1e-6) * body["std_error"]


def test_grouped_sums_equal_a_direct_count() -> None:
    """The per-cohort bit counting of RAPPOR, O-RAPPOR and CMS (sorted contiguous sums)."""
    from chorus_collector.estimators.common import grouped_sums

    rng = np.random.default_rng(2)
    groups = rng.integers(0, 7, size=3000)
    groups[groups == 4] = 5  # a group with no rows
    rows = (rng.random((3000, 70)) < 0.3).astype(np.uint8)
    direct = np.zeros((8, 70), dtype=np.int64)
    for g, row in zip(groups, rows, strict=True):
        direct[g] += row
    assert np.array_equal(grouped_sums(groups, rows, 8), direct)
    assert grouped_sums(np.array([], dtype=np.int64), rows[:0], 3).shape == (3, 70)


def test_olh_parameters_at_large_epsilon_are_computed_quickly() -> None:
    """Regression (catalogue review).

    The collision probability used to build a list of e^ε sizes (18 s at ε = 18)."""
    from chorus_shared.mechanisms.local_hashing import PRIME, collision_probability

    campaign = campaign_from_spec({"name": "o", "mechanism": "olh", "epsilon": 13.0,
                                   "domain": ["a", "b", "c"]}, warn=False)
    assert campaign.mechanism.g > 400_000  # type: ignore[attr-defined]
    sizes = [(PRIME - r + 6 - 1) // 6 for r in range(6)]
    exact = sum(n * (n - 1) for n in sizes) / (PRIME * (PRIME - 1))
    assert collision_probability(PRIME, 6) == pytest.approx(exact, rel=1e-15)
    assert math.isfinite(collision_probability(PRIME, 1 << 20))
