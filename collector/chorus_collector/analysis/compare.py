"""Comparisons: the change of each estimate between two windows, with a multiple-testing
correction across the values compared.

Each window is estimated as the estimates route does (unbiased, no post-processing). Per value
the difference current − baseline has standard error sqrt(se_b² + se_c²), a 95% interval and a
two-sided z-test p-value; across the m values, Benjamini–Hochberg (false discovery rate) or
Bonferroni (family-wise error rate) adjusts the p-values, and ``significant`` is adjusted
p < alpha.

Why the SE is conservative when users report in both windows: for an estimator linear in the
reports, f̂_W = (1/n_W) Σ_{u∈W} g(y_u) with E[g(y) | x] = 1[x = v] (unbiased), two windows'
estimates have covariance (1/(n_B n_C)) Σ_{u in both} Cov(g(y_u,B), g(y_u,C)); reports of
different users are independent. A user's two reports share the user's value: randomized
afresh, their covariance is Var(E[g | x]) = Var(1[x = v]) ≥ 0 (zero when the population is
fixed); memoized (the same report in both windows), it is Var(g(y)) ≥ 0. So
Var(diff) = var_B + var_C − 2 Cov ≤ var_B + var_C: the stated SE can only overstate it.

A discovery campaign (``pem``, ``treehist``) compared without candidates compares the values
its walk finds over both windows together (their summed statistics): one list, found once, so
a value frequent in either window is in it; each window then re-estimates that list (the
second stage, which reads only the final table the walk never ranked by, so the choice does
not bias the difference). The answer's ``discovery`` says what the walk did.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from chorus_collector.analysis.periods import describe_window
from chorus_collector.analysis.windows import (
    Estimate,
    check_window,
    discover,
    discovers,
    finalize,
    query_labels,
    value_estimates,
    window_inputs,
)
from chorus_collector.estimators import Query
from chorus_collector.jobs.tail import EstimateInputs
from chorus_collector.kinds import kind_of
from chorus_collector.problems import Problem
from chorus_collector.results.encoding import CsvWriter
from chorus_collector.results.estimates import CONFIDENCE, Z95
from chorus_collector.storage import Storage, StoredCampaign
from chorus_shared.campaign import Campaign

__all__ = ["CORRECTIONS", "ComparisonResult", "ComparisonRow", "adjusted_p_values",
           "compare_windows"]

CORRECTIONS = ("benjamini-hochberg", "bonferroni")
Window = tuple[int | None, int | None]


@dataclass(slots=True)
class ComparisonRow:
    value: str
    baseline_estimate: float | None
    baseline_std_error: float | None
    current_estimate: float | None
    current_std_error: float | None
    difference: float | None
    std_error: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    adjusted_p_value: float | None
    ci_excludes_zero: bool
    significant: bool
    #: Why the value was not tested (None: it was): a window's estimate states no standard
    #: error (a Square Wave distribution), so the change has none either.
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {name: _finite(getattr(self, name)) for name in _ROW_FIELDS}


_ROW_FIELDS = tuple(f.name for f in fields(ComparisonRow))


@dataclass(frozen=True)
class ComparisonResult:
    campaign: str
    mechanism: str
    epsilon: float
    estimate_kind: str
    baseline: dict[str, int | None]  # start, end, n
    current: dict[str, int | None]
    correction: str
    alpha: float
    variance_model: str
    rows: list[ComparisonRow]
    confidence: float = CONFIDENCE
    #: A discovery campaign compared without candidates: how its values were found.
    discovery: dict[str, Any] | None = field(default=None)
    #: A campaign with a schedule: what each window's estimate estimates.
    estimand: dict[str, str] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "comparison", "campaign": self.campaign, "mechanism": self.mechanism,
            "epsilon": self.epsilon, "estimate_kind": self.estimate_kind,
            "baseline": dict(self.baseline), "current": dict(self.current),
            "confidence": self.confidence, "correction": self.correction,
            "alpha": self.alpha, "variance_model": self.variance_model,
            "rows": [row.to_json() for row in self.rows]}
        if self.discovery is not None:
            body["discovery"] = self.discovery
        if self.estimand is not None:
            body["estimand"] = dict(self.estimand)
        return body

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        windows = ["baseline_start", "baseline_end", "baseline_n", "current_start",
                   "current_end", "current_n", "epsilon"]
        writer.writerow([*_ROW_FIELDS, *windows])
        bounds = [self.baseline["start"], self.baseline["end"], self.baseline["n"],
                  self.current["start"], self.current["end"], self.current["n"], self.epsilon]
        for row in self.rows:
            writer.writerow([*(_finite(getattr(row, name)) for name in _ROW_FIELDS), *bounds])
        return buffer.getvalue()


def compare_windows(storage: Storage, stored: StoredCampaign, *, baseline: Window,
                    current: Window, candidates: Sequence[str] = (),
                    correction: str = "benjamini-hochberg",
                    alpha: float = 0.05) -> ComparisonResult:
    """Each value's change from the ``baseline`` window to the ``current`` one, (start, end)
    each (None: open). The windows must not overlap and each needs min_batch_size reports.
    A discovery campaign without ``candidates`` compares the values found over both windows
    together (module docstring). Raises :class:`Problem`."""
    campaign = stored.campaign
    if correction not in CORRECTIONS:
        raise Problem("invalid-query", f"correction must be one of {list(CORRECTIONS)}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise Problem("invalid-query", "alpha must be a number between 0 and 1")
    wanted = tuple(candidates)
    labels = query_labels(campaign, wanted)
    check_window(*baseline, campaign.time_precision, "baseline_")
    check_window(*current, campaign.time_precision)
    _check_apart(baseline, current)
    old = _window_inputs(storage, stored, baseline, "baseline")
    new = _window_inputs(storage, stored, current, "current")
    discovery = None
    if discovers(campaign, wanted):
        found = discover(campaign, old.n + new.n, old.state + new.state,
                         [{"start": a, "end": b} for a, b in sorted(
                             (baseline, current), key=lambda w: -math.inf if w[0] is None
                             else w[0])])
        wanted, labels, discovery = found.values, list(found.values), found.to_json()
    before = finalize(campaign, old.n, old.state, Query(baseline[0], baseline[1], wanted))
    after = finalize(campaign, new.n, new.state, Query(current[0], current[1], wanted))
    rows = _rows(labels, before, after)
    adjusted = adjusted_p_values([math.nan if r.p_value is None else r.p_value for r in rows],
                                 correction)
    for row, p in zip(rows, adjusted, strict=True):
        row.adjusted_p_value = p if math.isfinite(p) else None
        row.significant = row.adjusted_p_value is not None and row.adjusted_p_value < alpha
    return ComparisonResult(
        campaign=campaign.name, mechanism=campaign.mechanism.name,
        epsilon=campaign.mechanism.epsilon, estimate_kind=kind_of(campaign).name,
        baseline={"start": baseline[0], "end": baseline[1], "n": before.n},
        current={"start": current[0], "end": current[1], "n": after.n},
        correction=correction, alpha=float(alpha),
        variance_model=_variance_model(before.variance_model, correction, len(rows)),
        rows=rows, discovery=discovery, estimand=_estimand(campaign, baseline, current))


def _estimand(campaign: Campaign, baseline: Window, current: Window) -> dict[str, str] | None:
    """What each window estimates, for a campaign with a schedule (``periods``)."""
    first, second = describe_window(campaign, *baseline), describe_window(campaign, *current)
    if first is None or second is None:
        return None
    return {"baseline": first, "current": second}


def adjusted_p_values(p_values: Sequence[float], correction: str) -> list[float]:
    """The p-values adjusted for testing them together; NaN (no test) stays NaN and is not
    counted in m. Benjamini–Hochberg: p_(i) · m / i, made monotone from the largest down;
    Bonferroni: p · m; both capped at 1."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(tested)
    adjusted = [math.nan] * len(p_values)
    if correction == "bonferroni":
        for p, i in tested:
            adjusted[i] = min(1.0, p * m)
        return adjusted
    if correction != "benjamini-hochberg":
        raise ValueError(f"correction must be one of {list(CORRECTIONS)}, not {correction!r}")
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, p * m / rank)
        adjusted[i] = running
    return adjusted


def _check_apart(baseline: Window, current: Window) -> None:
    low = max(-math.inf if baseline[0] is None else baseline[0],
              -math.inf if current[0] is None else current[0])
    high = min(math.inf if baseline[1] is None else baseline[1],
               math.inf if current[1] is None else current[1])
    if low < high:
        raise Problem("windows-overlap",
                      f"the baseline window {_shown(baseline)} and the current window "
                      f"{_shown(current)} overlap: the difference's standard error assumes "
                      "independent windows, so they may share no time bucket")


def _shown(window: Window) -> str:
    start, end = window
    return f"[{'−∞' if start is None else start}, {'∞' if end is None else end})"


def _window_inputs(storage: Storage, stored: StoredCampaign, window: Window,
                   label: str) -> EstimateInputs:
    try:
        return window_inputs(storage, stored, window[0], window[1])
    except Problem as problem:
        if problem.kind != "invalid-batch-size":
            raise
        raise Problem("invalid-batch-size", f"the {label} window: {problem.detail}",
                      headers=problem.headers, window=label, **problem.extra) from None


#: Said on each row whose windows state no standard error.
UNTESTED = ("not tested: the estimates state no standard error (Square Wave's intervals do "
            "not cover, so it reports none); the difference is shown without one. For "
            "changes that can be tested, collect the distribution with hh")


def _rows(labels: list[str], before: Estimate, after: Estimate) -> list[ComparisonRow]:
    old, new = value_estimates(before), value_estimates(after)
    rows = []
    for value in labels:
        b, c = old[value], new[value]
        difference = c.estimate - b.estimate
        if b.std_error is None or c.std_error is None:
            rows.append(ComparisonRow(
                value=value, baseline_estimate=b.estimate, baseline_std_error=b.std_error,
                current_estimate=c.estimate, current_std_error=c.std_error,
                difference=difference, std_error=None, ci_low=None, ci_high=None,
                p_value=None, adjusted_p_value=None, ci_excludes_zero=False,
                significant=False, note=UNTESTED))
            continue
        se = math.sqrt(b.std_error ** 2 + c.std_error ** 2)
        low, high = difference - Z95 * se, difference + Z95 * se
        p = math.erfc(abs(difference / se) / math.sqrt(2)) if se > 0 else math.nan
        rows.append(ComparisonRow(
            value=value, baseline_estimate=b.estimate, baseline_std_error=b.std_error,
            current_estimate=c.estimate, current_std_error=c.std_error,
            difference=difference, std_error=se, ci_low=low, ci_high=high,
            p_value=p if math.isfinite(p) else None, adjusted_p_value=None,
            ci_excludes_zero=bool(low > 0 or high < 0), significant=False))
    return rows


def _variance_model(model: str, correction: str, m: int) -> str:
    name = {"benjamini-hochberg": "Benjamini–Hochberg (false discovery rate)",
            "bonferroni": "Bonferroni (family-wise error rate)"}[correction]
    return (f"Each window: {model}. Independent windows: the difference's standard error is "
            "sqrt(se_baseline² + se_current²), which assumes each user reports at most once "
            "per window and the two windows' reports are independent. A user who reports in "
            "both windows (the same value randomized afresh, or a memoized report) makes the "
            "two windows' errors positively correlated (for an estimator linear in the "
            "reports), so the stated standard error is then conservative: the interval is too "
            "wide, never too narrow. p-values are two-sided z-tests, adjusted by "
            f"{name} over the {m} values compared; significant means adjusted p < alpha. "
            "Unbiased estimates only (no post-processing).")


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value
