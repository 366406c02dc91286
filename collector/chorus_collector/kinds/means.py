"""Kind "means": the means of several bounded numbers (a vector), one per attribute."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from chorus_collector.kinds.base import Bar, Bars, EstimateKind, ValueEstimate
from chorus_collector.results.estimates import VectorMeanEstimate
from chorus_collector.results.tables import (
    column_width,
    number,
    pad,
    shown_value,
    table_row,
    wrap_note,
)
from chorus_shared.campaign import Campaign

__all__ = ["MeansKind", "means_table"]


class MeansKind(EstimateKind):
    name: ClassVar[str] = "means"
    answer_type: ClassVar[type] = VectorMeanEstimate
    schemas: ClassVar[Mapping[str, Any]] = {
        "MeanRow": {
            "type": "object",
            "description": "one attribute's mean (kind 'means')",
            "required": ["attribute", "mean", "std_error", "ci_low", "ci_high"],
            "properties": {"attribute": {"type": "string"},
                           **{name: {"type": ["number", "null"]}
                              for name in ("mean", "std_error", "ci_low", "ci_high")}},
        },
    }
    template: ClassVar[str] = "kinds/means.html"

    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        return list(campaign.domain.names)  # type: ignore[union-attr]

    def value_estimates(self, result: VectorMeanEstimate) -> dict[str, ValueEstimate]:
        return {row.attribute: ValueEstimate(row.mean, row.std_error, row.ci_low, row.ci_high)
                for row in result.rows}

    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        return means_table(answer["rows"], truth)

    def chart(self, answer: Mapping[str, Any]) -> Bars:
        bars = [Bar(r["attribute"], r["mean"], r["ci_low"], r["ci_high"])
                for r in answer["rows"]]
        return Bars(bars, f"Estimates of {answer['campaign']} with 95% intervals",
                    f"{len(bars)} bars, one per mean, from n = {answer['n']} reports; each "
                    "whisker spans the 95% interval. The table below gives every value.")


def means_table(rows: list[dict[str, Any]], truth: Mapping[str, float] | None) -> list[str]:
    labels = [shown_value(row["attribute"]) for row in rows]
    width = column_width("attribute", labels)
    lines = [f"  {pad('attribute', width)}" + (f"{'true':>10}" if truth is not None else "")
             + f"{'mean':>12}{'std err':>10}   95% interval"]
    for row, label in zip(rows, labels, strict=True):
        true = f"{truth[row['attribute']]:>10.4g}" if truth is not None else ""
        lines += table_row(label, width,
                        f"{true}{number(row['mean'], '>12.4g')}"
                        f"{number(row['std_error'], '>10.4g')}   "
                        f"[{number(row['ci_low'], '.4g')}, {number(row['ci_high'], '.4g')}]")
    return lines + wrap_note(labels, width)
