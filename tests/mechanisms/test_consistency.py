"""Consistency post-processing chosen at query time (NDSS 2020; MECHANISMS.md §11)."""

from __future__ import annotations

import math
import random
import time
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.estimators import Query, common, estimator_for
from chorus_collector.estimators.consistency import (
    IBU_MAX_STEPS,
    KRRChannel,
    composite_mle,
    ibu,
    norm_sub,
    simplex_projection,
)
from chorus_shared import campaign_from_spec
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    campaign_spec,
    make_report,
)

VECTORS = [np.array([0.5, 0.4, 0.3, -0.1, -0.05]), np.array([0.2, -0.3, 0.1, 0.05]),
           np.array([1.3, -0.2, -0.1]), np.array([-0.1, -0.2, 0.05])]


@pytest.mark.parametrize("v", VECTORS)
def test_norm_sub_is_on_the_simplex_idempotent_and_a_shift(v: np.ndarray) -> None:
    x = norm_sub(v)
    assert x.min() >= 0
    assert x.sum() == pytest.approx(1.0)
    assert np.allclose(norm_sub(x), x)
    positive = x > 0
    shifts = (v - x)[positive]
    assert np.allclose(shifts, shifts[0])  # x_v = max(f̂_v − θ, 0)
    if np.clip(v, 0, None).sum() >= 1:
        assert np.allclose(x, simplex_projection(v))  # §11.2: then Norm-Sub is the projection


@pytest.mark.parametrize("v", VECTORS)
def test_projection_is_the_closest_point_of_the_simplex(v: np.ndarray) -> None:
    x = simplex_projection(v)
    rng = np.random.default_rng(1)
    for _ in range(300):
        other = rng.dirichlet(np.ones(len(v)))
        assert np.linalg.norm(v - x) <= np.linalg.norm(v - other) + 1e-12


def test_ibu_is_a_fixed_point_with_a_higher_likelihood() -> None:
    campaign = campaign_from_spec({"name": "k", "mechanism": "krr", "epsilon": 1.0,
                                   "domain": [f"v{i}" for i in range(6)]})
    mechanism = campaign.mechanism
    p, q = mechanism.support_probabilities()  # type: ignore[attr-defined]
    channel = np.full((6, 6), q)
    np.fill_diagonal(channel, p)
    counts = np.array([400, 250, 100, 80, 40, 30], dtype=float)
    fitted = ibu(counts, channel)
    assert fitted.converged
    pi = fitted.pi
    assert pi.min() >= 0
    assert pi.sum() == pytest.approx(1.0)
    again = pi * (channel.T @ (counts / (channel @ pi))) / counts.sum()
    assert np.allclose(again, pi, atol=1e-9)

    def loglik(x: np.ndarray) -> float:
        return float(counts @ np.log(channel @ x))

    unbiased = (counts / counts.sum() - q) / (p - q)
    assert loglik(pi) >= loglik(norm_sub(unbiased)) - 1e-9


def test_norm_sub_lowers_the_error_on_sparse_data() -> None:
    """The reason to offer it: on Zipf data over a large domain the unbiased estimates spread
    mass over many empty categories; Norm-Sub removes most of that error."""
    campaign = campaign_from_spec({"name": "o", "mechanism": "oue", "epsilon": 1.0,
                                   "domain": [f"v{i}" for i in range(100)]})
    mechanism = campaign.mechanism
    estimator = estimator_for("oue")
    pi = np.array([1 / (i + 1) ** 1.5 for i in range(100)])
    pi /= pi.sum()
    rng = np.random.default_rng(2)
    p, q = mechanism.support_probabilities()  # type: ignore[attr-defined]
    errors = {"none": 0.0, "norm-sub": 0.0}
    for _ in range(30):
        n = 5000
        values = rng.choice(100, size=n, p=pi)
        bits = rng.random((n, 100)) < q
        bits[np.arange(n), values] = rng.random(n) < p
        state = bits.sum(axis=0)
        for method in errors:
            rows = estimator.finalize(campaign, n, state, Query(postprocessing=method)).rows
            errors[method] += float(np.sum((np.array([r.frequency for r in rows]) - pi) ** 2))
    assert errors["norm-sub"] < 0.5 * errors["none"]


def test_postprocessing_through_the_api(http: FlaskClient) -> None:
    spec = {"name": "k", "mechanism": "krr", "epsilon": 0.5, "min_batch_size": 1,
            "domain": [f"v{i}" for i in range(8)]}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(3)
    reports = [make_report(config, "v0" if i % 3 else "v1", rng) for i in range(600)]
    http.post("/v1/reports", json={"reports": reports})
    url = "/v1/campaigns/k/estimates"
    base = http.get(url, headers=ANALYST_HEADERS).get_json()
    for method in ("norm-sub", "projection", "ibu"):
        body = http.get(f"{url}?postprocessing={method}", headers=ANALYST_HEADERS).get_json()
        frequencies = [r["frequency"] for r in body["rows"]]
        assert min(frequencies) >= 0
        assert sum(frequencies) == pytest.approx(1.0)
        assert body["postprocessing"].startswith(method)
        assert body["extra"]["unbiased_frequencies"] == [r["frequency"] for r in base["rows"]]
        for row in body["rows"]:
            assert 0 <= row["frequency_ci_low"] <= row["frequency_ci_high"] <= 1
        if method == "ibu":  # how EM stopped is part of the answer
            assert body["extra"]["ibu_converged"] is True
            assert 0 < body["extra"]["ibu_iterations"] < IBU_MAX_STEPS
            assert body["extra"]["ibu_tolerance"] == 1e-10
    duchi = {"name": "m", "mechanism": "duchi", "epsilon": 1.0, "min_batch_size": 1,
             "domain": {"kind": "numeric", "lo": 0, "hi": 1}}
    config = http.post("/v1/campaigns", json=duchi, headers=ADMIN_HEADERS).get_json()
    http.post("/v1/reports", json=make_report(config, 0.5, rng))
    refused = http.get("/v1/campaigns/m/estimates?postprocessing=norm-sub",
                       headers=ANALYST_HEADERS)
    assert refused.status_code == 400
    assert "postprocessing must be one of" in refused.get_json()["detail"]


@pytest.mark.parametrize("spec", [
    {"mechanism": "krr", "epsilon": 1.3, "domain": [f"v{i}" for i in range(5)]},
    {"mechanism": "hr", "epsilon": 0.8, "domain": [f"v{i}" for i in range(6)]},
    {"mechanism": "hr", "epsilon": 2.0, "domain": [f"v{i}" for i in range(8)]},
    {"mechanism": "shist", "epsilon": 1.1, "domain": [f"v{i}" for i in range(5)]},
    {"mechanism": "shist", "epsilon": 0.4, "domain": [f"v{i}" for i in range(16)]},
], ids=lambda s: f"{s['mechanism']}-{len(s['domain'])}")
def test_structured_channels_equal_the_exact_output_table(spec: dict[str, Any]) -> None:
    """IBU's fast channel operators (O(d) or one Walsh–Hadamard transform) must be the
    mechanism's exact output table, in the order of the estimator's output counts."""
    campaign = campaign_from_spec({"name": "c", **spec})
    mechanism = campaign.mechanism
    estimator = estimator_for(mechanism.name)
    d = len(mechanism.domain.values)  # type: ignore[union-attr]
    outputs = list(mechanism.outputs())
    dense = np.array([[mechanism.output_probability(y, x) for x in range(d)] for y in outputs])
    # Order the rows as the estimator's state: map() of the single output y is one-hot.
    order = [int(np.flatnonzero(estimator.map(mechanism, [y]))[0]) for y in outputs]
    table = np.zeros((estimator.state_size(mechanism), d))
    table[order] = dense
    if mechanism.name == "krr":
        from chorus_collector.estimators.consistency import KRRChannel
        p, q = mechanism.support_probabilities()  # type: ignore[attr-defined]
        channel: Any = KRRChannel(d, p, q)
    else:
        channel = estimator.channel(mechanism)  # type: ignore[attr-defined]
    rng = np.random.default_rng(4)
    for _ in range(3):
        pi, ratio = rng.dirichlet(np.ones(d)), rng.random(len(table))
        assert np.allclose(channel.forward(pi), table @ pi, rtol=1e-12, atol=1e-15)
        assert np.allclose(channel.backward(ratio), table.T @ ratio, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("per_value", [False, True], ids=["common-n", "per-value-trials"])
def test_composite_mle_satisfies_its_kkt_conditions(per_value: bool) -> None:
    """At the optimum every positive share has the same marginal likelihood gain μ and every
    zero share a gain of at most μ; the result lies on the simplex. With per-value trials n_v
    (dBitFlip: the reports that sampled v), the same with n_v in place of n."""
    from chorus_collector.estimators.consistency import composite_mle

    rng = np.random.default_rng(8)
    p, q, n = 0.5, 0.2, 4000
    pi_true = rng.dirichlet(np.full(12, 0.3))
    trials = rng.binomial(n, 1 / 12, size=12).astype(float) if per_value else np.full(12, n)
    counts = rng.binomial(trials.astype(np.int64), q + (p - q) * pi_true).astype(float)
    pi = composite_mle(counts, trials if per_value else n, p, q)
    assert pi.min() >= 0 and pi.sum() == pytest.approx(1.0)
    lam = q + (p - q) * pi
    gain = (p - q) * (counts / lam - (trials - counts) / (1 - lam))
    positive = pi > 1e-9
    assert np.ptp(gain[positive]) < 1e-6 * np.abs(gain[positive]).max() + 1e-6
    assert np.all(gain[~positive] <= gain[positive].min() + 1e-6)

    def loglik(x: np.ndarray) -> float:
        lam_x = q + (p - q) * x
        return float(counts @ np.log(lam_x) + (trials - counts) @ np.log(1 - lam_x))

    unbiased = (counts / trials - q) / (p - q)
    assert loglik(pi) >= loglik(norm_sub(unbiased)) - 1e-9
    assert loglik(pi) >= loglik(simplex_projection(unbiased)) - 1e-9


@pytest.mark.parametrize("mechanism", ["oue", "olh", "ss", "sue", "dbitflip", "basic_rappor"])
def test_mle_lowers_the_error_on_sparse_data(mechanism: str) -> None:
    """Like Norm-Sub, the composite MLE removes most of the unbiased estimates' error spread
    over empty categories (Zipf 1.5 over 64 categories, ε = 1)."""
    campaign = campaign_from_spec({"name": "m", "mechanism": mechanism, "epsilon": 1.0,
                                   "domain": [f"v{i}" for i in range(64)]})
    estimator = estimator_for(mechanism)
    p, q = campaign.mechanism.support_probabilities()  # type: ignore[attr-defined]
    pi = np.array([1 / (i + 1) ** 1.5 for i in range(64)])
    pi /= pi.sum()
    rng = np.random.default_rng(12)
    errors = {"none": 0.0, "mle": 0.0}
    n = 5000
    for _ in range(20):
        # Support counts of a pure oracle: C_v ~ Binomial(n, q + (p − q)π_v) per category.
        counts = rng.binomial(n, q + (p - q) * pi).astype(float)
        frequency = (counts / n - q) / (p - q)
        for method in errors:
            from chorus_collector.estimators.common import frequency_estimate

            result = frequency_estimate(campaign, n, frequency, np.zeros(64),
                                        Query(postprocessing=method), {})
            errors[method] += float(np.sum((np.array([r.frequency for r in result.rows])
                                            - pi) ** 2))
    assert method in estimator.postprocessing
    assert errors["mle"] < 0.5 * errors["none"]


def test_composite_mle_is_defined_on_empty_and_sparse_counts() -> None:
    assert composite_mle(np.zeros(4), 10, 0.75, 0.25).tolist() == [0.25] * 4
    pi = composite_mle(np.array([0, 0, 0, 0, 1.0]), 10, 0.75, 0.25)
    assert np.all(np.isfinite(pi)) and pi.sum() == pytest.approx(1.0) and pi.min() >= 0


def test_reported_frequencies_are_unbiased_not_clipped() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    multi-freq-ldpy's MI estimator clips and renormalises yet is presented as unbiased.
    Chorus's default output is the raw unbiased estimate, negative values included."""
    from chorus_collector.estimators import Query, estimator_for

    campaign = campaign_from_spec(campaign_spec("c", epsilon=0.5))
    estimator = estimator_for("krr")
    state = estimator.map(campaign.mechanism, [0] * 10 + [1] * 300 + [2] * 300 + [3] * 300)
    result = estimator.finalize(campaign, 910, state, Query())
    assert result.rows[0].frequency < 0
    assert result.postprocessing.startswith("none")
    assert sum(r.frequency for r in result.rows) == pytest.approx(1.0)


def _krr_counts(epsilon: float, d: int, n: int, seed: int) -> tuple[np.ndarray, KRRChannel]:
    e = math.exp(epsilon)
    p, q = e / (e + d - 1), 1 / (e + d - 1)
    rng = np.random.default_rng(seed)
    x = rng.choice(d, size=n, p=rng.dirichlet(np.full(d, 0.5)))
    lie = rng.integers(0, d - 1, n)
    y = np.where(rng.random(n) < p, x, np.where(lie >= x, lie + 1, lie))
    return np.bincount(y, minlength=d).astype(float), KRRChannel(d, p, q)


def test_ibu_converges_to_the_maximum_and_reports_how() -> None:
    """Regression (issue 13 #9): k-RR, ε = 0.5, d = 16, n = 10⁴ stopped after 10,000 EM steps
    or 5 s, 0.0021 away from a 200,000-step answer, and further away under load. Now it stops
    on a tolerance, accelerated, and says so."""
    counts, channel = _krr_counts(0.5, 16, 10_000, 7)
    fitted = ibu(counts, channel)
    assert fitted.converged and fitted.iterations < IBU_MAX_STEPS
    reference = np.full(16, 1 / 16)
    for _ in range(200_000):  # plain EM, far past convergence
        reference = reference * channel.backward(counts / channel.forward(reference)) / 10_000
    # Within 10⁻⁴ of the maximum (the standard errors here are about 10⁻²), against 2·10⁻³
    # for the old 10,000 plain EM steps.
    assert np.max(np.abs(fitted.pi - reference)) < 1e-4

    def loglik(pi: np.ndarray) -> float:
        return float(counts @ np.log(channel.forward(pi)))

    assert loglik(fitted.pi) >= loglik(reference) - 1e-6


def test_ibu_gives_the_same_answer_whatever_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    counts, channel = _krr_counts(1.0, 64, 100_000, 3)
    first = ibu(counts, channel)
    ticks = iter(range(0, 10**9, 1000))  # a clock that races: a deadline would fire at once
    monkeypatch.setattr(time, "monotonic", lambda: float(next(ticks)))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    second = ibu(counts, channel)
    assert np.array_equal(first.pi, second.pi)
    assert (first.iterations, first.converged) == (second.iterations, second.converged)


def test_ibu_stops_at_its_step_cap_and_says_it_did_not_converge() -> None:
    counts, channel = _krr_counts(1.0, 64, 100_000, 3)
    capped = ibu(counts, channel, max_steps=10)
    assert capped.iterations <= 10 and not capped.converged
    assert capped.pi.min() >= 0 and capped.pi.sum() == pytest.approx(1.0)


def test_ibu_whose_step_cap_would_cost_too_much_is_refused(
        http: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The time is bounded before EM starts, by the cap and the channel's cost per step,
    never by a deadline in the middle (which made answers depend on the load)."""
    spec = {"name": "h", "mechanism": "hr", "epsilon": 1.0, "min_batch_size": 1,
            "domain": [f"v{i}" for i in range(30)]}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(4)
    http.post("/v1/reports", json={"reports": [make_report(config, "v3", rng)
                                               for _ in range(50)]})
    url = "/v1/campaigns/h/estimates?postprocessing=ibu"
    assert http.get(url, headers=ANALYST_HEADERS).status_code == 200
    # HR with d = 30 runs on K = 32: 32·log2(32) = 160 operations a step.
    monkeypatch.setattr(common, "IBU_MAX_WORK", 160 * IBU_MAX_STEPS - 1)
    refused = http.get(url, headers=ANALYST_HEADERS)
    assert refused.status_code == 422
    assert refused.get_json()["type"].endswith("/query-too-large")
    assert "norm-sub or projection" in refused.get_json()["detail"]
