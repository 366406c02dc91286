"""A record campaign's estimate: each attribute's marginal, joint and conditional frequencies,
and independence tests; with its JSON and CSV.

The CSV is one long table, one statistic per row: ``statistic`` is ``marginal`` (the share of
``values`` in ``attributes``), ``joint`` (the share of the cell ``values``, joined by ``|``,
of the attributes joined by ``|``), ``conditional`` (the share of ``values`` among records
with ``given``) or ``independence`` (the χ² statistic in ``estimate`` with ``df`` and
``p_value``).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

from chorus_collector.results.encoding import CsvWriter, context_values, finite_or_none, json_safe
from chorus_collector.results.estimates import CONFIDENCE, Z95, FrequencyRow

__all__ = ["NOT_ESTIMABLE", "Cell", "Conditional", "IndependenceTest", "Joint", "Marginal",
           "Power", "RecordEstimate"]

SEPARATOR = "|"


@dataclass(frozen=True, slots=True)
class Cell:
    """One share with its uncertainty: a joint cell, or a conditional frequency."""

    values: tuple[str, ...]
    frequency: float
    std_error: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, values: tuple[str, ...], frequency: float, std_error: float) -> Cell:
        return cls(values, frequency, std_error, frequency - Z95 * std_error,
                   frequency + Z95 * std_error)

    def clipped(self, frequency: float) -> Cell:
        """A post-processed share: the same SE, the unbiased interval intersected with [0, 1]."""
        low = max(0.0, self.ci_low) if math.isfinite(self.ci_low) else self.ci_low
        high = min(1.0, self.ci_high) if math.isfinite(self.ci_high) else self.ci_high
        return Cell(self.values, frequency, self.std_error, low, high)

    def to_json(self) -> dict[str, Any]:
        return {"values": list(self.values), "frequency": finite_or_none(self.frequency),
                "std_error": finite_or_none(self.std_error),
                "ci_low": finite_or_none(self.ci_low), "ci_high": finite_or_none(self.ci_high)}


@dataclass(frozen=True)
class Marginal:
    """One attribute's distribution and how many reports informed it."""

    attribute: str
    rows: list[FrequencyRow]
    reports: int

    def to_json(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "reports": self.reports,
                "rows": [{"value": r.value, "frequency": finite_or_none(r.frequency),
                          "std_error": finite_or_none(r.frequency_std_error),
                          "ci_low": finite_or_none(r.frequency_ci_low),
                          "ci_high": finite_or_none(r.frequency_ci_high)} for r in self.rows]}


#: What a conditional's row says when its total is not told apart from 0.
NOT_ESTIMABLE = "not estimable at this n"
#: How a conditional's 95% interval is computed.
FIELLER = ("Fieller: every ratio r with |J_gv − r·M_g| ≤ 1.96·SE(J_gv − r·M_g); the standard "
           "error is the delta method's")


@dataclass(frozen=True)
class Conditional:
    """P(``of`` = value | ``given`` = given value): cells (given value, value). A given value in
    ``not_estimable`` has a row total whose 95% interval holds 0 (its Fieller set is
    unbounded): its cells are null and say so."""

    of: str
    given: str
    cells: list[Cell]
    not_estimable: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"of": self.of, "given": self.given, "interval": FIELLER,
                "not_estimable": list(self.not_estimable), "cells": [
                    {"given_value": c.values[0], "value": c.values[1],
                     **{k: v for k, v in c.to_json().items() if k != "values"},
                     **({"estimable": False, "note": f"{NOT_ESTIMABLE}: the share of records "
                         f"with {self.given}={c.values[0]} is not told apart from 0"}
                        if c.values[0] in self.not_estimable else {"estimable": True})}
                    for c in self.cells]}


@dataclass(frozen=True, slots=True)
class Power:
    """The chance that the test rejects at the 0.05 level, at this sample size, when the
    attributes are associated with strength Cohen's w = ``effect`` (w² = Σ (π − π₁⊗π₂)²/π₁⊗π₂),
    averaged over the association's directions; estimated margins and covariance (simulated
    for the Wald test, the non-central χ² for Pearson's: ``estimators/independence.py``)."""

    effect: float
    power: float

    def to_json(self) -> dict[str, Any]:
        return {"cohens_w": self.effect, "power": finite_or_none(self.power)}


@dataclass(frozen=True)
class IndependenceTest:
    """A test of H₀: the two attributes are independent, computed on the reports."""

    statistic: float
    df: int
    p_value: float
    method: str
    power: list[Power] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"statistic": finite_or_none(self.statistic), "df": self.df,
                "p_value": finite_or_none(self.p_value), "method": self.method,
                "reject_at_0.05": bool(self.p_value < 0.05),
                "power": [p.to_json() for p in self.power]}


@dataclass(frozen=True)
class Joint:
    """The joint distribution of some attributes; cells in row-major order (the first
    attribute varies slowest). Two-attribute joints carry both conditionals and the test."""

    attributes: tuple[str, ...]
    shape: tuple[int, ...]
    cells: list[Cell]
    reports: int
    conditionals: list[Conditional] = field(default_factory=list)
    independence: IndependenceTest | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "shape": list(self.shape),
                "reports": self.reports, "cells": [c.to_json() for c in self.cells],
                "conditionals": [c.to_json() for c in self.conditionals],
                "independence": None if self.independence is None
                else self.independence.to_json()}


@dataclass(frozen=True)
class RecordEstimate:
    campaign: str
    mechanism: str
    epsilon: float
    n: int
    attributes: list[str]
    marginals: list[Marginal]
    joints: list[Joint]
    variance_model: str
    #: How the numbers were computed, in words.
    method: str
    window: dict[str, int | None]
    postprocessing: str
    confidence: float = CONFIDENCE
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "record", "campaign": self.campaign, "mechanism": self.mechanism,
                "epsilon": self.epsilon, "n": self.n, "window": self.window,
                "confidence": self.confidence, "attributes": self.attributes,
                "method": self.method, "variance_model": self.variance_model,
                "postprocessing": self.postprocessing,
                "marginals": [m.to_json() for m in self.marginals],
                "joints": [j.to_json() for j in self.joints],
                "extra": json_safe(self.extra), "warnings": self.warnings}

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        writer.writerow(["statistic", "attributes", "values", "given", "estimate",
                         "std_error", "ci_low", "ci_high", "df", "p_value",
                         "window_start", "window_end", "n", "epsilon"])
        context = context_values(self.window, self.n, self.epsilon)
        for marginal in self.marginals:
            for row in marginal.rows:
                writer.writerow(["marginal", marginal.attribute, row.value, None,
                                 row.frequency, row.frequency_std_error, row.frequency_ci_low,
                                 row.frequency_ci_high, None, None, *context])
        for joint in self.joints:
            names = SEPARATOR.join(joint.attributes)
            for cell in joint.cells:
                writer.writerow(["joint", names, SEPARATOR.join(cell.values), None,
                                 cell.frequency, cell.std_error, cell.ci_low, cell.ci_high,
                                 None, None, *context])
            for conditional in joint.conditionals:
                for cell in conditional.cells:
                    writer.writerow(["conditional", conditional.of, cell.values[1],
                                     f"{conditional.given}={cell.values[0]}", cell.frequency,
                                     cell.std_error, cell.ci_low, cell.ci_high, None, None,
                                     *context])
            test = joint.independence
            if test is not None:
                writer.writerow(["independence", names, None, None, test.statistic, None,
                                 None, None, test.df, test.p_value, *context])
        return buffer.getvalue()
