"""Estimators, one per mechanism, under the mechanism's name and in the module named like the
mechanism's module in ``chorus_shared.mechanisms`` (a test keeps the two registries paired).
Helpers that several share are in ``common``; post-processing in ``consistency``."""

from __future__ import annotations

from typing import Any

from chorus_collector.estimators.base import Estimator, Query, QueryError
from chorus_collector.estimators.dbitflip import DBitFlipEstimator
from chorus_collector.estimators.discovery import PEMEstimator, TreeHistEstimator
from chorus_collector.estimators.duchi import DuchiEstimator, OneBitMeanEstimator
from chorus_collector.estimators.hadamard import HadamardEstimator
from chorus_collector.estimators.hierarchical import HierarchicalEstimator
from chorus_collector.estimators.krr import BinaryRREstimator, KRREstimator
from chorus_collector.estimators.laplace import LaplaceEstimator
from chorus_collector.estimators.local_hashing import BLHEstimator, LocalHashingEstimator
from chorus_collector.estimators.multidim import (
    DuchiMultidimEstimator,
    HarmonyEstimator,
    HybridMultidimEstimator,
    PiecewiseMultidimEstimator,
)
from chorus_collector.estimators.open_alphabet import OpenRapporEstimator, OpenRRDecoder
from chorus_collector.estimators.piecewise import HybridEstimator, PiecewiseEstimator
from chorus_collector.estimators.rappor import (
    BasicRapporEstimator,
    BooleanRapporEstimator,
    RapporEstimator,
)
from chorus_collector.estimators.record import (
    MarginalsEstimator,
    RandomSamplingFakeDataEstimator,
    SampledAttributeEstimator,
    SplitBudgetEstimator,
)
from chorus_collector.estimators.sketch import (
    CountMeanSketchEstimator,
    HadamardCountMeanSketchEstimator,
)
from chorus_collector.estimators.square_wave import SquareWaveEstimator
from chorus_collector.estimators.subset import SubsetEstimator
from chorus_collector.estimators.succinct import SuccinctHistogramEstimator
from chorus_collector.estimators.unary import OUEEstimator, UnaryEstimator

__all__ = ["ESTIMATORS", "Estimator", "Query", "QueryError", "estimator_for"]

# Any: each estimator decodes its own mechanism class, which ``Estimator.checked`` verifies.
ESTIMATORS: dict[str, Estimator[Any]] = {
    e.name: e for e in (
        BinaryRREstimator(), KRREstimator(), UnaryEstimator(), OUEEstimator(),
        SubsetEstimator(), HadamardEstimator(), SuccinctHistogramEstimator(),
        LocalHashingEstimator(), BLHEstimator(), DBitFlipEstimator(),
        RapporEstimator(), BasicRapporEstimator(), BooleanRapporEstimator(),
        OpenRRDecoder(), OpenRapporEstimator(), CountMeanSketchEstimator(),
        HadamardCountMeanSketchEstimator(),
        DuchiEstimator(), OneBitMeanEstimator(), PiecewiseEstimator(), HybridEstimator(),
        LaplaceEstimator(),
        DuchiMultidimEstimator(), HarmonyEstimator(), PiecewiseMultidimEstimator(),
        HybridMultidimEstimator(), SquareWaveEstimator(), HierarchicalEstimator(),
        SampledAttributeEstimator(), SplitBudgetEstimator(), RandomSamplingFakeDataEstimator(),
        MarginalsEstimator(), PEMEstimator(), TreeHistEstimator(),
    )
}


def estimator_for(mechanism_name: str) -> Estimator[Any]:
    return ESTIMATORS[mechanism_name]
