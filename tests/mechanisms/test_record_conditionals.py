"""Conditional frequencies with small row totals (issue 34, item 5): Fieller intervals, and
"not estimable at this n" where the row total is not told apart from 0.

Setting: a pair of 3 × 3 attributes, rows holding 10%, 40% and 50% of users, P(b | a) =
(0.2, 0.3, 0.5) in every row, k-RR over the 9 cells at ε = 1 (what a marginals campaign
uses), n = 5,000 reports; 2,000 runs drawn exactly (tests/helpers/recordsim.py).

* The reported intervals (rows estimable in that run) cover the true conditional in the
  binomial band 0.95 ± z·SE (z = 3.5: 1e-3 Bonferroni over the 6 cells checked). Measured:
  10% row 0.94–0.95 (29% of runs not estimable), 50% row 0.944–0.95.
* In this setting the delta method's interval on every run (the old answer) over-covers the
  10% row (0.97–0.99) with point estimates from −0.6 to 1.3: the rows now declared not
  estimable are where it failed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from chorus_collector.estimators import Query
from chorus_collector.estimators.record import (
    MarginalsEstimator,
    conditional,
    oracle_table,
)
from chorus_collector.kinds.record import record_lines
from chorus_collector.results.record import NOT_ESTIMABLE
from chorus_shared import campaign_from_spec
from chorus_shared.domain import Categories
from chorus_shared.mechanisms.record import least_variance_oracle
from helpers.recordsim import draw_state, oracle_counts
from helpers.support import z_threshold

ROWS = (0.1, 0.4, 0.5)
SHARES = (0.2, 0.3, 0.5)
LABELS = [["a0", "a1", "a2"], ["b0", "b1", "b2"]]
RUNS = 2_000


def _runs(epsilon: float, n: int, runs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per run and cell of P(b | a): (frequency, ci_low, ci_high) and whether the row was
    estimable."""
    joint = np.outer(ROWS, SHARES)
    oracle = least_variance_oracle(epsilon, Categories(tuple(map(str, range(joint.size)))))
    rng = np.random.default_rng(seed)
    cells, estimable = [], []
    for _ in range(runs):
        counts = oracle_counts(oracle, rng.multinomial(n, joint.ravel()), rng)
        table = oracle_table(oracle, counts.astype(np.float64), n).reshaped(joint.shape)
        answer = conditional(table, ("a", "b"), LABELS, given=0)
        cells.append([[c.frequency, c.ci_low, c.ci_high] for c in answer.cells])
        estimable.append([g not in answer.not_estimable for g in LABELS[0]])
    return np.array(cells).reshape(runs, 3, 3, 3), np.array(estimable)


@pytest.mark.parametrize("row", [0, 2], ids=["10%-row", "50%-row"])
def test_fieller_intervals_cover_where_the_row_is_estimable(row: int) -> None:
    cells, estimable = _runs(1.0, 5_000, RUNS, 3_450)
    shown = cells[estimable[:, row], row]
    count = len(shown)
    assert count > RUNS / 2  # most runs estimate even the 10% row at this n
    covered = (shown[:, :, 1] <= np.array(SHARES)) & (np.array(SHARES) <= shown[:, :, 2])
    half = z_threshold(1e-3, 6) * math.sqrt(0.95 * 0.05 / count)
    for value, rate in enumerate(covered.mean(axis=0)):
        assert abs(rate - 0.95) < half, (row, value, rate, count)
    # The point lies inside its interval, and a row never estimable shows no number.
    assert np.all((shown[:, :, 1] <= shown[:, :, 0]) & (shown[:, :, 0] <= shown[:, :, 2]))
    assert np.all(np.isnan(cells[~estimable[:, row], row]))


def test_the_small_row_is_often_not_estimable_and_the_large_never() -> None:
    """The decision is M/SE(M) > 1.96: for the 10% row at n = 5,000 (M ≈ 0.1, SE ≈ 0.06) it
    fails in a good share of runs, for the 50% row never."""
    _, estimable = _runs(1.0, 5_000, 300, 3_451)
    assert 0.1 < 1 - estimable[:, 0].mean() < 0.5
    assert estimable[:, 2].all()


def test_fieller_interval_equals_the_delta_interval_when_the_total_is_sharp() -> None:
    """At n = 10⁷ the row total's relative error is tiny and Fieller's interval is the delta
    method's, f ± 1.96·SE, to 1% of its width (they differ at second order in M's
    relative error)."""
    joint = np.outer(ROWS, SHARES)
    oracle = least_variance_oracle(1.0, Categories(tuple(map(str, range(9)))))
    p, q = oracle.support_probabilities()
    n = 10**7
    table = oracle_table(oracle, n * (q + (p - q) * joint.ravel()), n).reshaped((3, 3))
    for cell in conditional(table, ("a", "b"), LABELS, given=0).cells:
        width = cell.ci_high - cell.ci_low
        assert cell.ci_low == pytest.approx(cell.frequency - 1.96 * cell.std_error,
                                            abs=1e-2 * width)
        assert cell.ci_high == pytest.approx(cell.frequency + 1.96 * cell.std_error,
                                             abs=1e-2 * width)


def test_a_row_not_estimable_says_so_in_the_answer_the_table_and_the_warnings() -> None:
    """A 1% row at n = 2,000 and ε = 1: its total's interval holds 0. The JSON cells are null
    with estimable false and the note, the conditional lists the row, the answer warns, the
    terminal table prints the words instead of a number, and post-processing keeps it null."""
    campaign = campaign_from_spec({
        "name": "rare", "mechanism": "marginals", "epsilon": 1.0,
        "domain": {"kind": "record", "attributes": [
            {"name": "a", "values": ["common", "rare"]},
            {"name": "b", "values": ["x", "y", "z"]}]}})
    joint = np.outer((0.99, 0.01), (0.2, 0.3, 0.5))
    state = draw_state(campaign.mechanism, joint, 2_000, np.random.default_rng(3_452))
    for method in ("none", "norm-sub"):
        answer = MarginalsEstimator().finalize(campaign, 2_000, state,
                                               Query(postprocessing=method))
        given_a = next(c for c in answer.joints[0].conditionals if c.given == "a")
        assert given_a.not_estimable == ("rare",)
        body = answer.to_json()["joints"][0]["conditionals"]
        cells = [c for c in next(c for c in body if c["given"] == "a")["cells"]
                 if c["given_value"] == "rare"]
        assert len(cells) == 3
        for cell in cells:
            assert cell["estimable"] is False and cell["note"].startswith(NOT_ESTIMABLE)
            assert cell["frequency"] is None and cell["ci_low"] is None
        common = [c for c in next(c for c in body if c["given"] == "a")["cells"]
                  if c["given_value"] == "common"]
        assert all(c["estimable"] and c["frequency"] is not None for c in common)
        assert any("P(b | a=rare): not estimable at this n" in w for w in answer.warnings)
        assert NOT_ESTIMABLE in "\n".join(record_lines(answer.to_json()))
