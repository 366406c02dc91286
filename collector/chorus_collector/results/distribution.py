"""A distribution's estimate (histogram, CDF, quantiles, ranges, mean) and its JSON and CSV.

The CSV is one long table, one statistic per row, so that it loads into any spreadsheet or
data frame as is: ``statistic`` is ``bucket`` (the share in [lo, hi)), ``cdf`` (the share at
or below ``hi``), ``quantile`` (the ``q``-quantile), ``range`` (the share in [lo, hi]) or
``mean``; ``value`` is the estimate, with its standard error and 95% interval (empty cells
where the answer states none: Square Wave).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from chorus_collector.results.encoding import CsvWriter, context_values, json_safe
from chorus_collector.results.estimates import CONFIDENCE

__all__ = ["DistributionEstimate", "Statistic", "quantile_label"]


def quantile_label(q: float) -> str:
    """p50, p95, p99.9: how a dashboard names a quantile."""
    return f"p{round(q * 100, 6):g}"


@dataclass(frozen=True, slots=True)
class Statistic:
    """One estimated number with its uncertainty. ``lo``/``hi`` bound the bucket or range it
    is about (None where it has none), ``q`` is the quantile's level. The standard error and
    interval are None where the fit states none (Square Wave: the answer's
    ``extra["intervals"]`` says why)."""

    value: float
    std_error: float | None
    ci_low: float | None
    ci_high: float | None
    lo: float | None = None
    hi: float | None = None
    q: float | None = None

    def to_json(self) -> dict[str, Any]:
        body = {name: getattr(self, name) for name in ("lo", "hi", "q") if
                getattr(self, name) is not None}
        body.update(value=self.value, std_error=self.std_error, ci_low=self.ci_low,
                    ci_high=self.ci_high)
        return body


@dataclass(frozen=True)
class DistributionEstimate:
    campaign: str
    mechanism: str
    epsilon: float
    n: int
    #: The buckets' edges on the campaign's scale (buckets + 1 numbers) and that scale.
    edges: list[float]
    scale: str
    histogram: list[Statistic]
    cdf: list[Statistic]
    quantiles: list[Statistic]
    ranges: list[Statistic]
    mean: Statistic
    variance_model: str
    #: How the distribution was fitted and how its uncertainty was computed, in words.
    method: str
    uncertainty: str
    window: dict[str, int | None]
    postprocessing: str
    confidence: float = CONFIDENCE
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "distribution", "campaign": self.campaign, "mechanism": self.mechanism,
            "epsilon": self.epsilon, "n": self.n, "window": self.window,
            "confidence": self.confidence, "scale": self.scale, "edges": self.edges,
            "method": self.method, "uncertainty": self.uncertainty,
            "variance_model": self.variance_model, "postprocessing": self.postprocessing,
            "histogram": [s.to_json() for s in self.histogram],
            "cdf": [s.to_json() for s in self.cdf],
            "quantiles": [s.to_json() for s in self.quantiles],
            "ranges": [s.to_json() for s in self.ranges],
            "mean": self.mean.to_json(),
            "extra": self.extra, "warnings": self.warnings,
        }
        cleaned: dict[str, Any] = json_safe(body)
        return cleaned

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        writer.writerow(["statistic", "lo", "hi", "q", "value", "std_error", "ci_low",
                         "ci_high", "window_start", "window_end", "n", "epsilon"])
        context = context_values(self.window, self.n, self.epsilon)
        for name, rows in (("bucket", self.histogram), ("cdf", self.cdf),
                           ("quantile", self.quantiles), ("range", self.ranges),
                           ("mean", [self.mean])):
            for row in rows:
                writer.writerow([name, row.lo, row.hi, row.q, row.value, row.std_error,
                                 row.ci_low, row.ci_high, *context])
        return buffer.getvalue()
