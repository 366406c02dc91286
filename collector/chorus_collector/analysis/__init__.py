"""The analyst's queries over stored statistics: one window, a time series, two windows.

* :func:`estimate_window` (windows.py): one window's estimate, as the estimates route answers;
* :func:`estimate_series` (series.py): estimates per bucket, day, week or n seconds, from the
  per-bucket statistics (cost flat in the number of reports);
* :func:`compare_windows` (compare.py): each value's change between two windows, with its
  standard error, interval, p-value and a multiple-testing correction.

Every refusal is a :class:`chorus_collector.problems.Problem` (the HTTP routes answer it as a
4xx problem document); the results render with ``to_json()`` and ``to_csv()``.
"""

from __future__ import annotations

from chorus_collector.analysis.compare import (
    CORRECTIONS,
    ComparisonResult,
    ComparisonRow,
    adjusted_p_values,
    compare_windows,
)
from chorus_collector.analysis.series import (
    MAX_POINTS,
    Series,
    SeriesPoint,
    SeriesResult,
    estimate_series,
)
from chorus_collector.analysis.windows import Estimate, estimate_window

__all__ = ["CORRECTIONS", "MAX_POINTS", "ComparisonResult", "ComparisonRow", "Estimate",
           "Series", "SeriesPoint", "SeriesResult", "adjusted_p_values", "compare_windows",
           "estimate_series", "estimate_window"]
