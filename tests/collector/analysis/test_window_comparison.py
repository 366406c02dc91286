"""Window comparisons (GET|POST /v1/campaigns/<name>/compare, ``analysis.compare_windows``).

Statistical checks, with seeded simulations (``chorus_collector.design.simulate``) of k-RR reports
drawn i.i.d. from a known distribution (the estimator's own variance model, i.i.d.
sampling) and stored as folded statistics:

* a real change of 0.05 between two windows of 10⁵ reports is flagged (|z| ≈ 9);
* under the null (the same distribution in both windows), over R seeded repetitions, the
  per-category rate of intervals that exclude 0 is the nominal 5% within a binomial band, the
  rate of repetitions with any ``significant`` value (family-wise, the false discovery rate
  under the full null) is at most 5% within the band, and the stated SE of the difference
  matches the empirical SD (a chi-square band);
* Benjamini–Hochberg and Bonferroni equal hand-computed adjusted p-values.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.analysis import adjusted_p_values, compare_windows
from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.problems import Problem
from chorus_collector.storage import Storage, StoredCampaign
from helpers.support import ANALYST_HEADERS, NOW, chi2_band, z_threshold

HOUR = 3600
T0 = int(NOW)
NULL = [0.4, 0.3, 0.2, 0.1]


def _store(storage: Storage, stored: StoredCampaign,
           windows: Sequence[tuple[int, Sequence[float], int]], seed: int) -> None:
    """Simulated reports of (bucket time, distribution, n) per window, folded into the
    per-bucket statistics as the aggregation job stores them."""
    rng = np.random.default_rng(seed)
    mechanism = stored.campaign.mechanism
    estimator = estimator_for(mechanism.name)
    partials = {}
    for time, distribution, n in windows:
        inputs = rng.choice(len(distribution), size=n, p=distribution)
        partials[(stored.id, time)] = (n, estimator.map(mechanism, simulate(mechanism, inputs,
                                                                           rng)))
    assert storage.commit_fold(0, 0, partials, NOW, moves=storage.fold_status().moves)


@pytest.fixture
def krr(app: Flask, create: Callable[..., dict[str, Any]]) -> tuple[Storage, StoredCampaign]:
    create("changes", mechanism="krr", epsilon=1.0, min_batch_size=100)
    storage: Storage = app.extensions["chorus.storage"]
    stored = storage.get_campaign("changes")
    assert stored is not None
    return storage, stored


def test_a_planted_change_is_flagged_and_the_route_says_so(
        http: FlaskClient, krr: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = krr
    _store(storage, stored, [(T0, NULL, 100_000), (T0 + HOUR, [0.45, 0.25, 0.2, 0.1], 100_000)],
           seed=1)
    reply = http.get("/v1/campaigns/changes/compare", headers=ANALYST_HEADERS, query_string={
        "baseline_start": T0, "baseline_end": T0 + HOUR, "start": T0 + HOUR,
        "end": T0 + 2 * HOUR})
    assert reply.status_code == 200, reply.get_json()
    body = reply.get_json()
    assert body["kind"] == "comparison" and body["correction"] == "benjamini-hochberg"
    assert body["baseline"] == {"start": T0, "end": T0 + HOUR, "n": 100_000}
    assert body["current"]["n"] == 100_000 and body["estimate_kind"] == "frequency"
    assert "Independent windows" in body["variance_model"]
    rows = {row["value"]: row for row in body["rows"]}
    for value, change in (("a", 0.05), ("b", -0.05)):
        row = rows[value]
        assert row["significant"] and row["ci_excludes_zero"] and row["adjusted_p_value"] < 1e-6
        assert row["ci_low"] < change < row["ci_high"]
        assert row["difference"] == pytest.approx(row["current_estimate"]
                                                  - row["baseline_estimate"])
        assert row["std_error"] == pytest.approx(math.hypot(row["baseline_std_error"],
                                                            row["current_std_error"]))
    # The same through the library, with Bonferroni, and as CSV.
    result = compare_windows(storage, stored, baseline=(T0, T0 + HOUR),
                             current=(T0 + HOUR, None), correction="bonferroni")
    assert [r.significant for r in result.rows][:2] == [True, True]
    assert result.to_json()["correction"] == "bonferroni"
    table = list(csv.DictReader(io.StringIO(result.to_csv())))
    assert [r["value"] for r in table] == ["a", "b", "c", "d"]
    assert table[0]["significant"] == "true" and table[0]["baseline_n"] == "100000"
    assert table[0]["current_end"] == "" and table[0]["epsilon"] == "1.0"


def test_under_the_null_error_rates_and_standard_errors_are_nominal(
        krr: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = krr
    repetitions, n = 1000, 1000
    _store(storage, stored, [(T0 + i * HOUR, NULL, n) for i in range(2 * repetitions)],
           seed=7)
    excluded = np.zeros(len(NULL))
    any_significant = {"benjamini-hochberg": 0, "bonferroni": 0}
    differences, variances = [], []
    for i in range(repetitions):
        baseline = (T0 + 2 * i * HOUR, T0 + (2 * i + 1) * HOUR)
        current = (baseline[1], baseline[1] + HOUR)
        for correction in any_significant:
            result = compare_windows(storage, stored, baseline=baseline, current=current,
                                     correction=correction)
            any_significant[correction] += any(row.significant for row in result.rows)
        excluded += [row.ci_excludes_zero for row in result.rows]
        differences.append([row.difference for row in result.rows])
        variances.append([row.std_error ** 2 for row in result.rows])
    # Six binomial checks and four chi-square ones share a 10⁻³ false alarm.
    z = z_threshold(1e-3, tests=10)
    band = z * math.sqrt(0.05 * 0.95 / repetitions)
    for rate in excluded / repetitions:
        assert abs(rate - 0.05) <= band, excluded / repetitions
    for correction, count in any_significant.items():
        assert count / repetitions <= 0.05 + band, (correction, count)
    low, high = chi2_band(repetitions - 1, 1e-3 / 10)
    ratio = np.var(differences, axis=0, ddof=1) / np.mean(variances, axis=0)
    assert np.all((low <= ratio) & (ratio <= high)), ratio


def test_adjusted_p_values_match_the_hand_computation() -> None:
    p = [0.01, 0.04, 0.03, 0.005, math.nan]  # the NaN is not a test: m = 4
    # BH: sorted 0.005, 0.01, 0.03, 0.04 → ·4/1, ·4/2, ·4/3, ·4/4 = 0.02, 0.02, 0.04, 0.04,
    # then the running minimum from the largest down.
    assert adjusted_p_values(p, "benjamini-hochberg")[:4] == pytest.approx(
        [0.02, 0.04, 0.04, 0.02])
    assert adjusted_p_values(p, "bonferroni")[:4] == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert all(math.isnan(a[4]) for a in (adjusted_p_values(p, "bonferroni"),
                                          adjusted_p_values(p, "benjamini-hochberg")))
    assert adjusted_p_values([0.5, 0.9], "bonferroni") == [1.0, 1.0]
    assert adjusted_p_values([0.2, 0.01, 0.3], "benjamini-hochberg") == pytest.approx(
        [0.3, 0.03, 0.3])


def test_a_mean_campaign_compares_its_mean(http: FlaskClient, app: Flask,
                                           create: Callable[..., dict[str, Any]]) -> None:
    create("latency", mechanism="duchi", min_batch_size=10)
    storage: Storage = app.extensions["chorus.storage"]
    stored = storage.get_campaign("latency")
    assert stored is not None
    rng = np.random.default_rng(3)
    mechanism = stored.campaign.mechanism
    partials = {}
    for hour, centre in ((0, -0.2), (1, 0.2)):
        inputs = np.clip(rng.normal(centre, 0.1, 5000), -1, 1)
        partials[(stored.id, T0 + hour * HOUR)] = (5000, estimator_for("duchi").map(
            mechanism, simulate(mechanism, inputs, rng)))
    assert storage.commit_fold(0, 0, partials, NOW, moves=storage.fold_status().moves)
    reply = http.post("/v1/campaigns/latency/compare", headers=ANALYST_HEADERS,
                      json={"baseline_end": T0 + HOUR, "start": T0 + HOUR, "alpha": 0.01})
    assert reply.status_code == 200, reply.get_json()
    body = reply.get_json()
    (row,) = body["rows"]
    assert body["estimate_kind"] == "mean" and row["value"] == "mean" and body["alpha"] == 0.01
    assert row["significant"] and row["difference"] > 0  # 0.4 of [−1, 1] is 20 of [0, 100]
    assert row["ci_low"] < 20 < row["ci_high"]


@pytest.mark.parametrize(("query", "status", "kind"), [
    ({"baseline_start": T0, "baseline_end": T0 + 2 * HOUR, "start": T0 + HOUR}, 422,
     "windows-overlap"),
    ({"start": T0}, 422, "windows-overlap"),  # an open baseline overlaps everything
    ({"baseline_end": T0 + HOUR, "start": T0 + HOUR, "end": T0 + 2 * HOUR}, 409,
     "invalid-batch-size"),  # the current window is empty
    ({"baseline_end": T0 + HOUR, "start": T0 + HOUR, "correction": "holm"}, 400,
     "invalid-query"),
    ({"baseline_end": T0 + HOUR, "start": T0 + HOUR, "alpha": "1.5"}, 400, "invalid-query"),
    ({"baseline_end": T0 + HOUR, "start": T0 + HOUR, "alpha": "nan"}, 400, "invalid-query"),
    ({"baseline_end": T0 + 1, "start": T0 + HOUR}, 400, "window-misaligned"),
    ({"baseline_end": T0 + HOUR, "start": T0 + HOUR, "candidate": "x"}, 400,
     "invalid-query"),
    ({"baseline_end": T0 + HOUR, "current_start": T0 + HOUR}, 400, "invalid-query"),
])
def test_bad_comparisons_are_problems(query: dict[str, Any], status: int, kind: str,
                                      http: FlaskClient,
                                      krr: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = krr
    _store(storage, stored, [(T0, NULL, 500)], seed=4)
    reply = http.get("/v1/campaigns/changes/compare", query_string=query,
                     headers=ANALYST_HEADERS)
    assert reply.status_code == status, reply.get_json()
    assert reply.mimetype == "application/problem+json"
    problem = reply.get_json()
    assert problem["type"].endswith("/" + kind)
    if kind == "invalid-batch-size":
        assert problem["detail"].startswith("the current window") and problem["n"] == 0


def test_the_library_refuses_overlap_with_the_reason(
        krr: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = krr
    with pytest.raises(Problem, match="assumes independent windows") as caught:
        compare_windows(storage, stored, baseline=(T0, T0 + 2 * HOUR),
                        current=(T0 + HOUR, None))
    assert caught.value.status == 422
