"""Under the null (the same distribution in both windows), a rule over many values fires in
at most a fraction alpha of runs: the multiple-testing correction holds the family-wise
false alarm rate. R = 60 seeded runs of a 10-value k-RR campaign (5,000 simulated reports per
window, i.i.d. sampling: the estimator's own variance model), each its own campaign and rule.

The check's band: under Bin(60, 0.05), 10 or more firing runs has probability 0.0007, so the
test fails by chance about once in 1,400. Its power: without the correction a run raises a
false alarm with probability about 1 − 0.95¹⁰ ≈ 0.40 (24 runs in 60 expected; P(≥ 10) >
0.9999), which the same runs show by counting the uncorrected p-values below alpha.
"""

from __future__ import annotations

import pytest
from flask import Flask
from test_alert_delivery import HOUR, T0, planted

from chorus_collector.alerts import AlertWork
from chorus_collector.analysis import compare_windows
from chorus_collector.storage import Storage
from chorus_shared.campaign import campaign_from_spec
from helpers.support import NOW, campaign_spec

RUNS, VALUES, ALPHA, N = 60, 10, 0.05, 5000
BAND = 10  # P(Bin(60, 0.05) >= 10) = 0.0007
NULL = [0.19, 0.15, 0.12, 0.1, 0.1, 0.09, 0.08, 0.07, 0.06, 0.04]


@pytest.mark.parametrize("correction", ["benjamini-hochberg", "bonferroni"])
def test_the_correction_keeps_false_alarms_at_alpha_over_null_runs(app: Flask,
                                                                   correction: str) -> None:
    storage: Storage = app.extensions["chorus.storage"]
    work = AlertWork(storage, public_url=None, clock=lambda: NOW + 30,
                     post=lambda url, body, headers: 200)
    domain = [f"v{i}" for i in range(VALUES)]
    fired = uncorrected = 0
    for run in range(RUNS):
        stored, _ = storage.insert_campaign(campaign_from_spec(campaign_spec(
            f"null-{run}", mechanism="krr", epsilon=1.0, domain=domain)))
        planted(storage, stored, NULL, NULL, N, seed=1000 + run)
        rule = storage.insert_alert_rule(
            f"null-{run}", stored.id, {"window": HOUR, "values": [], "correction": correction,
                                       "alpha": ALPHA, "min_change": 0.0, "resolved": False},
            "http://127.0.0.1:9/hook", None, NOW)
        assert work.after_fold([stored.id]) == 1
        fired += len(storage.alert_firings(rule.id, 10))
        raw = compare_windows(storage, stored, baseline=(T0 - 2 * HOUR, T0 - HOUR),
                              current=(T0 - HOUR, T0), correction=correction, alpha=ALPHA)
        uncorrected += any(row.p_value is not None and row.p_value < ALPHA for row in raw.rows)
    assert fired < BAND, f"{fired} of {RUNS} null runs fired"
    assert uncorrected >= BAND, uncorrected  # what an uncorrected rule would have sent
