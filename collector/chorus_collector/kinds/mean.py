"""Kind "mean": the mean of one bounded number."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from chorus_collector.kinds.base import Bar, Bars, EstimateKind, ValueEstimate
from chorus_collector.results.estimates import MeanEstimate
from chorus_shared.campaign import Campaign

__all__ = ["MeanKind"]


class MeanKind(EstimateKind):
    name: ClassVar[str] = "mean"
    answer_type: ClassVar[type] = MeanEstimate
    template: ClassVar[str] = "kinds/mean.html"

    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        return ["mean"]

    def value_estimates(self, result: MeanEstimate) -> dict[str, ValueEstimate]:
        return {"mean": ValueEstimate(result.mean, result.std_error, result.ci_low,
                                      result.ci_high)}

    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        line = (f"  mean {answer['mean']:.4f} ± {answer['std_error']:.4f} "
                f"(95% CI {answer['ci_low']:.4f} … {answer['ci_high']:.4f})")
        if truth is not None:
            line = f"  true mean {truth['mean']:.4f}   estimated" + line[6:]
        return [line]

    def chart(self, answer: Mapping[str, Any]) -> Bars:
        bars = [Bar("mean", answer["mean"], answer["ci_low"], answer["ci_high"])]
        return Bars(bars, f"Estimates of {answer['campaign']} with 95% intervals",
                    f"{len(bars)} bars, one per mean, from n = {answer['n']} reports; each "
                    "whisker spans the 95% interval. The table below gives every value.")
