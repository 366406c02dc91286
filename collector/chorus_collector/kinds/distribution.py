"""Kind "distribution": a number's histogram, CDF, quantiles, ranges and mean (mechanisms sw
and hh)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from chorus_collector.estimators.base import DEFAULT_QUANTILES
from chorus_collector.kinds.base import (
    EstimateKind,
    Histogram,
    HistogramBucket,
    QuantileMarker,
    ValueEstimate,
)
from chorus_collector.results.distribution import DistributionEstimate, quantile_label
from chorus_shared.campaign import Campaign

__all__ = ["DistributionKind", "distribution_lines"]


class DistributionKind(EstimateKind):
    name: ClassVar[str] = "distribution"
    answer_type: ClassVar[type] = DistributionEstimate
    schemas: ClassVar[Mapping[str, Any]] = {
        "Statistic": {
            "type": "object",
            "description": "one number of a distribution with its standard error and 95% "
                           "interval; lo/hi bound the bucket or range, q is a quantile's "
                           "level. std_error, ci_low and ci_high are null where the answer "
                           "states no uncertainty (mechanism sw: extra.intervals says why)",
            "required": ["value", "std_error", "ci_low", "ci_high"],
            "properties": {
                **{name: {"type": "number"} for name in ("lo", "hi", "q", "value")},
                **{name: {"type": ["number", "null"]} for name in
                   ("std_error", "ci_low", "ci_high")}},
        },
    }
    template: ClassVar[str] = "kinds/distribution.html"

    def query_parameters(self, campaign: Campaign) -> frozenset[str]:
        return frozenset({"quantiles", "ranges"})

    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        """The default quantiles (p50, p95, p99) and the mean."""
        return [*(quantile_label(q) for q in DEFAULT_QUANTILES), "mean"]

    def value_estimates(self, result: DistributionEstimate) -> dict[str, ValueEstimate]:
        """The quantiles with the standard error their interval implies (half its width over
        z), and the mean."""
        out = {quantile_label(row.q or 0.0): ValueEstimate(row.value, row.std_error,
                                                            row.ci_low, row.ci_high)
               for row in result.quantiles}
        mean = result.mean
        out["mean"] = ValueEstimate(mean.value, mean.std_error, mean.ci_low, mean.ci_high)
        return out

    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        return distribution_lines(answer)

    def chart(self, answer: Mapping[str, Any]) -> Histogram:
        """The histogram with its interval band, and the quantiles over it."""
        buckets = [HistogramBucket(b["lo"], b["hi"], b["value"], b["ci_low"], b["ci_high"])
                   for b in answer["histogram"]]
        edges, scale = answer["edges"], answer["scale"]
        markers = [QuantileMarker(quantile_label(q["q"]), q["value"], q["ci_low"], q["ci_high"],
                                  _position(edges, q["value"], scale),
                                  _maybe_position(edges, q["ci_low"], scale),
                                  _maybe_position(edges, q["ci_high"], scale))
                   for q in answer["quantiles"]]
        # A Square Wave answer states no intervals: no band, no shaded spans, and said so.
        bands = all(b.low is not None and b.high is not None for b in buckets)
        title = (f"Distribution of {answer['campaign']}: {len(buckets)} buckets on a "
                 f"{scale} scale, " + ("with 95% bands and quantiles" if bands else
                                       "with quantiles (no intervals)"))
        said = "; ".join(f"{m.label} {m.value:.4g}" + (
            f" (95% interval {m.low:.4g} to {m.high:.4g})"
            if m.low is not None and m.high is not None else "") for m in markers)
        band = "the shaded band their 95% intervals" if bands else \
            "without intervals (this answer states none)"
        description = (f"Bars are each bucket's share of n = {answer['n']} reports, {band}; "
                       f"vertical lines mark the quantiles: {said}. "
                       "The tables below give every number.")
        return Histogram(buckets, markers, title, description)


def _maybe_position(edges: list[float], value: float | None, scale: str) -> float | None:
    return None if value is None else _position(edges, value, scale)


def _position(edges: list[float], value: float, scale: str) -> float:
    """Where ``value`` lies in bucket units (bucket j spans [j, j + 1)), on the scale."""
    j = max(0, min(len(edges) - 2, next((i for i in range(len(edges) - 1)
                                         if value < edges[i + 1]), len(edges) - 2)))
    low, high = edges[j], edges[j + 1]
    if scale == "log":
        inside = math.log(value / low) / math.log(high / low) if value > 0 else 0.0
    else:
        inside = (value - low) / (high - low)
    return j + min(max(inside, 0.0), 1.0)


#: The coarse histogram a terminal shows (the full one is in the JSON and CSV answers).
COARSE_BARS = 16
BAR_WIDTH = 40


def distribution_lines(result: Mapping[str, Any]) -> list[str]:
    """Quantiles, ranges and the mean with their intervals, then a coarse histogram."""
    lines = [f"  {result['method']}", f"  uncertainty: {result['uncertainty']}",
             f"  {'':<10}{'value':>14}  {'95% CI':>31}"]
    rows = [(quantile_label(q["q"]), q) for q in result["quantiles"]]
    rows.append(("mean", result["mean"]))
    for label, row in rows:
        lines.append(f"  {label:<10}{_on_scale(row['value']):>14}  "
                     f"[{_on_scale(row['ci_low']):>14}, {_on_scale(row['ci_high']):>14}]")
    for row in result["ranges"]:
        error = "" if row["std_error"] is None else (
            f" ± {row['std_error']:.4f} (95% CI {row['ci_low']:.4f} … {row['ci_high']:.4f})")
        lines.append(f"  share in [{_on_scale(row['lo']).strip()}, {_on_scale(row['hi']).strip()}]"
                     f" {row['value']:.4f}{error}")
    if isinstance(result.get("extra", {}).get("intervals"), str):
        lines.append(f"  intervals: {result['extra']['intervals']}")
    histogram = result["histogram"]
    group = max(1, -(-len(histogram) // COARSE_BARS))
    shares = [sum(max(0.0, b["value"]) for b in histogram[i:i + group])
              for i in range(0, len(histogram), group)]
    top = max(shares) or 1.0
    lines.append(f"  histogram ({len(histogram)} buckets on a {result['scale']} scale, shown "
                 f"{group} to a bar; every bucket with its interval is in the JSON and CSV)")
    for i, share in zip(range(0, len(histogram), group), shares, strict=True):
        low, high = histogram[i]["lo"], histogram[min(i + group, len(histogram)) - 1]["hi"]
        bar = "█" * round(BAR_WIDTH * share / top)
        lines.append(f"  [{_on_scale(low):>12}, {_on_scale(high):>12})  {share:6.3f} {bar}")
    return lines


def _on_scale(value: float | None) -> str:
    """A number on the campaign's scale, to 6 significant digits."""
    return "—" if value is None else f"{value:.6g}"
