"""Estimate results and their JSON and CSV renderings."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from chorus_collector.results.encoding import (
    CONTEXT_COLUMNS,
    CsvWriter,
    context_values,
    finite_or_none,
    json_safe,
)

__all__ = ["CONFIDENCE", "Z95", "FrequencyEstimate", "FrequencyRow", "MeanEstimate", "MeanRow",
           "VectorMeanEstimate", "frequency_rows"]

CONFIDENCE = 0.95
Z95 = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.959963984540054


@dataclass(slots=True)  # not frozen: a frozen init costs 1.5 µs a row, 10 ms per 10⁴ rows
class FrequencyRow:
    """One category's (or candidate's) estimate. Frequencies are fractions of n."""

    value: str
    count: float
    count_std_error: float
    count_ci_low: float
    count_ci_high: float
    frequency: float
    frequency_std_error: float
    frequency_ci_low: float
    frequency_ci_high: float
    detected: bool | None = None

    def postprocessed(self, frequency: float, n: int) -> FrequencyRow:
        """This row with a post-processed frequency: the same SE, and the unbiased interval
        intersected with [0, 1] (every frequency lies there, so coverage is kept), widened to
        the post-processed point where that fell outside it (a superset covers at least as
        often; before, a point shifted by norm-sub could lie outside its own interval, and an
        interval wholly below 0 came out inverted)."""
        low, high = max(0.0, self.frequency_ci_low), min(1.0, self.frequency_ci_high)
        low, high = min(low, frequency), max(high, frequency)
        return FrequencyRow(value=self.value, count=n * frequency,
                            count_std_error=self.count_std_error, count_ci_low=n * low,
                            count_ci_high=n * high, frequency=frequency,
                            frequency_std_error=self.frequency_std_error,
                            frequency_ci_low=low, frequency_ci_high=high,
                            detected=self.detected)

    @classmethod
    def from_frequency(cls, value: str, frequency: float, std_error: float, n: int,
                       detected: bool | None = None, interval: tuple[float, float] | None = None,
                       ) -> FrequencyRow:
        """A row with the interval ``frequency ± Z95·std_error``, or ``interval`` where the
        estimator's error is not symmetric (the sketches' hash collisions)."""
        low, high = interval if interval is not None else \
            (frequency - Z95 * std_error, frequency + Z95 * std_error)
        return cls(value=value, count=n * frequency, count_std_error=n * std_error,
                   count_ci_low=n * low, count_ci_high=n * high, frequency=frequency,
                   frequency_std_error=std_error, frequency_ci_low=low, frequency_ci_high=high,
                   detected=detected)


def frequency_rows(values: Sequence[str], frequency: np.ndarray, std_error: np.ndarray,
                   n: int) -> list[FrequencyRow]:
    """``FrequencyRow.from_frequency`` for many rows at once: the arithmetic in numpy, one
    positional constructor call per row (a 1024-category estimate in well under a millisecond).
    """
    frequency = np.asarray(frequency, dtype=np.float64)
    std_error = np.asarray(std_error, dtype=np.float64)
    low, high = frequency - Z95 * std_error, frequency + Z95 * std_error
    columns = [n * frequency, n * std_error, n * low, n * high, frequency, std_error, low, high]
    return [FrequencyRow(value, *numbers) for value, *numbers in
            zip(values, *(c.tolist() for c in columns), strict=True)]


@dataclass(frozen=True)
class FrequencyEstimate:
    campaign: str
    mechanism: str
    epsilon: float
    n: int
    rows: list[FrequencyRow]
    variance_model: str
    window: dict[str, int | None]
    postprocessing: str = "none (unbiased)"
    confidence: float = CONFIDENCE
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the numbers cannot say by themselves, in words (e.g. candidates that do not
    #: explain the reports).
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        # Field by field, not asdict(): asdict deep-copies every row (twice, with the rows
        # added again), which made a 65,536-category answer take seconds (issue 13 #6).
        body = {name: json_safe(getattr(self, name)) for name in _FIELDS if name != "rows"}
        body["kind"] = "frequency"
        body["rows"] = [{name: finite_or_none(getattr(row, name)) for name in _ROW_FIELDS}
                        for row in self.rows]
        return body

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        writer.writerow([*_ROW_FIELDS, *CONTEXT_COLUMNS])
        context = context_values(self.window, self.n, self.epsilon)
        for row in self.rows:
            writer.writerow([*(getattr(row, name) for name in _ROW_FIELDS), *context])
        return buffer.getvalue()


@dataclass(frozen=True)
class MeanEstimate:
    campaign: str
    mechanism: str
    epsilon: float
    n: int
    mean: float
    std_error: float
    ci_low: float
    ci_high: float
    variance_model: str
    window: dict[str, int | None]
    confidence: float = CONFIDENCE
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mean(cls, *, mean: float, std_error: float, **kwargs: Any) -> MeanEstimate:
        return cls(mean=mean, std_error=std_error, ci_low=mean - Z95 * std_error,
                   ci_high=mean + Z95 * std_error, **kwargs)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["kind"] = "mean"
        cleaned: dict[str, Any] = json_safe(body)
        return cleaned

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        # n stays where it was (fifth) for the readers of the earlier columns.
        writer.writerow(["mean", "std_error", "ci_low", "ci_high", "n", "window_start",
                         "window_end", "epsilon"])
        window_start, window_end, n, epsilon = context_values(self.window, self.n, self.epsilon)
        writer.writerow([self.mean, self.std_error, self.ci_low, self.ci_high, n,
                         window_start, window_end, epsilon])
        return buffer.getvalue()


@dataclass(frozen=True)
class MeanRow:
    """One attribute's mean, on the attribute's own scale."""

    attribute: str
    mean: float
    std_error: float
    ci_low: float
    ci_high: float

    @classmethod
    def from_mean(cls, attribute: str, mean: float, std_error: float) -> MeanRow:
        return cls(attribute=attribute, mean=mean, std_error=std_error,
                   ci_low=mean - Z95 * std_error, ci_high=mean + Z95 * std_error)


@dataclass(frozen=True)
class VectorMeanEstimate:
    """The means of several attributes collected together (a vector domain)."""

    campaign: str
    mechanism: str
    epsilon: float
    n: int
    rows: list[MeanRow]
    variance_model: str
    window: dict[str, int | None]
    confidence: float = CONFIDENCE
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["kind"] = "means"
        body["rows"] = [asdict(r) for r in self.rows]
        cleaned: dict[str, Any] = json_safe(body)
        return cleaned

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = CsvWriter(buffer)
        writer.writerow(["attribute", "mean", "std_error", "ci_low", "ci_high", "n",
                         "window_start", "window_end", "epsilon"])
        window_start, window_end, n, epsilon = context_values(self.window, self.n, self.epsilon)
        for row in self.rows:
            writer.writerow([row.attribute, row.mean, row.std_error, row.ci_low, row.ci_high,
                             n, window_start, window_end, epsilon])
        return buffer.getvalue()


_ROW_FIELDS = tuple(FrequencyRow.__dataclass_fields__)
#: What every CSV row says beside its numbers, after the estimate's own columns (so readers of
#: the earlier columns keep working): the window (Unix seconds, end excluded; empty where
#: unbounded), the reports it holds and the ε of each.


_FIELDS = tuple(FrequencyEstimate.__dataclass_fields__)
