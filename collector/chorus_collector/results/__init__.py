"""What an estimate answers: the result types (``estimates``, ``distribution``, ``record``),
each with its JSON and CSV rendering, the ``Answer`` protocol they share (``answer``), and the
building blocks of terminal tables (``tables``: the kinds build their tables from them)."""

from __future__ import annotations

from chorus_collector.results.distribution import DistributionEstimate
from chorus_collector.results.estimates import (
    CONFIDENCE,
    Z95,
    FrequencyEstimate,
    FrequencyRow,
    MeanEstimate,
    MeanRow,
    VectorMeanEstimate,
)
from chorus_collector.results.record import RecordEstimate

__all__ = ["CONFIDENCE", "Z95", "DistributionEstimate", "FrequencyEstimate", "FrequencyRow",
           "MeanEstimate", "MeanRow", "RecordEstimate", "VectorMeanEstimate"]
