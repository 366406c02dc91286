"""Means of several attributes: Duchi et al. multidimensional, Harmony, and PM/HM with
attribute sampling (MECHANISMS.md §9.3, §9.6, §9.7), on a ``vector`` domain.

The registry-wide privacy tests (test_privacy) enumerate these mechanisms too; here: exact
unbiasedness and per-coordinate variance by enumeration, the estimator against that exact
variance, the even-D tie rule, and the vector domain's validation.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.estimators import Query
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.errors import CampaignError, ValueDomainError
from chorus_shared.mechanisms import DuchiMultidim, SampledAttributes
from helpers.examples import example_campaigns
from helpers.statcheck import assert_unbiased_with_exact_variance, run_repetitions
from helpers.support import ADMIN_HEADERS, make_report

VECTOR_CAMPAIGNS = [c for c in example_campaigns() if c.mechanism.estimate_kind == "means"]
POINTS = [(-1.0, 1.0, 0.3, -0.2), (0.0, 0.0, 0.0, 0.0), (0.9, -0.45, 1.0, -1.0),
          (1.0, 1.0, 1.0, 1.0)]


def _exact_moments(mechanism: Any, t: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """E[t* | t] and E[t*² | t] per coordinate, by enumerating every output."""
    first, second = np.zeros(len(t)), np.zeros(len(t))
    for y in mechanism.outputs():
        p = mechanism.output_probability(y, t)
        value = np.array(mechanism.report_value(y))
        first += p * value
        second += p * value**2
    return first, second


def _expected_variance(mechanism: Any, t: tuple[float, ...]) -> np.ndarray:
    """Per-coordinate Var[t*_j | t] from the mechanism's own theory."""
    if isinstance(mechanism, DuchiMultidim):
        return np.array(mechanism.per_coordinate_variance(t))
    assert isinstance(mechanism, SampledAttributes)
    inner, scale = mechanism.inner, mechanism.scale
    inner_outputs = list(inner.outputs())
    second = [math.fsum(inner.output_probability(y, tj) * inner.report_value(y) ** 2
                        for y in inner_outputs) for tj in t]
    # (D/k)·E_inner[t*²] − t_j²: sampled with probability k/D, scaled by D/k.
    return np.array([scale * s - tj * tj for s, tj in zip(second, t, strict=True)])


@pytest.mark.parametrize("campaign", VECTOR_CAMPAIGNS, ids=lambda c: c.name)
def test_vector_reports_are_exactly_unbiased_with_the_stated_variance(
        campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    d = mechanism.domain.size  # type: ignore[union-attr]
    for point in POINTS:
        t = point[:d]
        first, second = _exact_moments(mechanism, t)
        assert np.allclose(first, t, atol=1e-9), (t, first)
        assert np.allclose(second - np.array(t) ** 2, _expected_variance(mechanism, t),
                           rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("campaign", VECTOR_CAMPAIGNS, ids=lambda c: c.name)
def test_vector_worst_case_variance_bounds_every_coordinate(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    d = mechanism.domain.size  # type: ignore[union-attr]
    worst = 0.0
    for point in [*POINTS, (0.5,) * 4, (-0.7,) * 4]:
        t = point[:d]
        first, second = _exact_moments(mechanism, t)
        worst = max(worst, float(np.max(second - first**2)))
    bound = mechanism.worst_case_variance()  # type: ignore[attr-defined]
    slack = 0.0
    if isinstance(mechanism, SampledAttributes) and mechanism.name != "harmony":
        slack = mechanism.scale * mechanism.inner.step**2 / 4
    assert worst - 1e-9 <= bound <= worst + slack + 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("campaign", VECTOR_CAMPAIGNS, ids=lambda c: c.name)
def test_vector_means_are_unbiased_with_the_exact_variance(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    domain = mechanism.domain
    d = domain.size  # type: ignore[union-attr]
    n, reps = 300, 600
    rng = random.Random(3)
    values = [[span.lo + (span.hi - span.lo) * rng.random() ** (1 + j)  # type: ignore[union-attr]
               for j, span in enumerate(domain.ranges)] for _ in range(n)]  # type: ignore[union-attr]
    inputs = [mechanism.encode(v) for v in values]
    truth = np.array(values).mean(axis=0)
    scales = np.array([(s.hi - s.lo) / 2 for s in domain.ranges])  # type: ignore[union-attr]
    exact = np.zeros(d)
    for t in inputs:
        first, second = _exact_moments(mechanism, t)
        exact += second - first**2
    exact *= scales**2 / n**2

    def extract(result: Any) -> tuple[np.ndarray, np.ndarray]:
        assert [r.attribute for r in result.rows] == list(domain.names)  # type: ignore[union-attr]
        return (np.array([r.mean for r in result.rows]),
                np.array([r.std_error for r in result.rows]))

    estimates, _ = run_repetitions(campaign, inputs, [{}] * n, reps, Query(), extract)
    assert_unbiased_with_exact_variance(estimates, truth, exact)


def test_even_dimension_ties_in_both_halves_would_break_privacy() -> None:
    """§9.3 puts ties (s·v = 0) in both T⁺ and T⁻: a tie then has probability 1/|T| while an
    opposed vector has (1 − p)/|T|, a ratio of 1 + e^ε. Chorus gives ties weight 1/2^D."""
    eps = 1.0
    p = math.exp(eps) / (1 + math.exp(eps))
    half = 3  # D = 2: |T⁺| = |{s : s·v ≥ 0}| = 3
    both_halves_ratio = (1 / half) / ((1 - p) / half)
    assert math.log(both_halves_ratio) == pytest.approx(math.log(1 + math.exp(eps)))
    assert math.log(both_halves_ratio) > eps
    campaign = campaign_from_spec({"name": "d2", "mechanism": "duchi_md", "epsilon": eps,
                                   "domain": {"kind": "vector", "attributes": [
                                       {"name": "x", "lo": 0, "hi": 1},
                                       {"name": "y", "lo": 0, "hi": 1}]}})
    mechanism = campaign.mechanism
    table = [[mechanism.output_probability(s, t) for s in mechanism.outputs()]
             for t in mechanism.inputs()]
    worst = max(a[i] / b[i] for a in table for b in table for i in range(4))
    assert math.log(worst) == pytest.approx(eps, rel=1e-12)


def test_default_attributes_per_report_follow_the_paper() -> None:
    def k(eps: float, d: int) -> int:
        spec = {"name": "v", "mechanism": "pm_md", "epsilon": eps, "domain": {
            "kind": "vector", "attributes": [{"name": f"a{i}", "lo": 0, "hi": 1}
                                             for i in range(d)]}}
        mechanism = campaign_from_spec(spec).mechanism
        assert isinstance(mechanism, SampledAttributes)
        assert mechanism.inner.epsilon == pytest.approx(eps / mechanism.k)
        return mechanism.k

    assert [k(1.0, 5), k(2.5, 5), k(7.6, 5), k(9.9, 2), k(5.0, 1)] == [1, 1, 3, 2, 1]


@pytest.mark.parametrize(("domain", "message"), [
    ({"kind": "vector"}, "attributes"),
    ({"kind": "vector", "attributes": []}, "attributes"),
    ({"kind": "vector", "attributes": [{"name": "a", "lo": 1, "hi": 0}]}, "lo < hi"),
    ({"kind": "vector", "attributes": [{"name": "a", "lo": 0}]}, "name"),
    ({"kind": "vector", "attributes": [{"name": "a", "lo": 0, "hi": 1}] * 2}, "distinct"),
    ({"kind": "vector", "attributes": [{"name": f"a{i}", "lo": 0, "hi": 1}
                                       for i in range(65)]}, "at most 64"),
])
def test_bad_vector_domains_are_refused(domain: dict[str, Any], message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        campaign_from_spec({"name": "v", "mechanism": "harmony", "epsilon": 1.0,
                            "domain": domain})


def test_vector_values_are_checked_and_clipped_on_the_device() -> None:
    spec = {"name": "v", "mechanism": "duchi_md", "epsilon": 1.0, "domain": {
        "kind": "vector", "attributes": [{"name": "cpu", "lo": 0, "hi": 100},
                                         {"name": "mem", "lo": 0, "hi": 8}]}}
    mechanism = campaign_from_spec(spec).mechanism
    assert mechanism.encode({"cpu": 50, "mem": 80}) == (0.0, 1.0)  # mem clipped to 8
    assert mechanism.encode([0, 4]) == (-1.0, 0.0)
    for bad in ({"cpu": 1}, {"cpu": 1, "mem": 2, "disk": 3}, [1], "12", {"cpu": "x", "mem": 1},
                {"cpu": math.nan, "mem": 1}):
        with pytest.raises(ValueDomainError):
            mechanism.encode(bad)
    for mechanism_name in ("duchi", "krr"):
        with pytest.raises(CampaignError, match="domain"):
            campaign_from_spec({**spec, "mechanism": mechanism_name})


def _vector(d: int) -> dict[str, Any]:
    return {"kind": "vector", "attributes": [{"name": f"a{i}", "lo": 0, "hi": 1}
                                            for i in range(d)]}


def test_duchi_md_masks_always_fit_the_wire(http: FlaskClient) -> None:
    """Regression (catalogue review).

    A 64-bit mask can need 20 digits, which the collector refuses: D is capped at 63, and
    the largest 63-bit mask is accepted."""
    with pytest.raises(CampaignError, match="at most 63"):
        campaign_from_spec({"name": "v", "mechanism": "duchi_md", "epsilon": 1.0,
                            "domain": _vector(64)})
    spec = {"name": "v", "mechanism": "duchi_md", "epsilon": 1.0, "domain": _vector(63),
            "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    report = make_report(config, [0.5] * 63, random.Random(0), payload=(1 << 63) - 1)
    assert http.post("/v1/reports", json={"reports": [report]}).get_json()["accepted"] == 1
