"""Estimators, one per mechanism and under the same name as in ``chorus_shared.mechanisms``."""

from __future__ import annotations

from chorus_collector.estimators.base import Estimator, Query, QueryError
from chorus_collector.estimators.basic_rappor import BasicRapporEstimator, BooleanRapporEstimator
from chorus_collector.estimators.duchi import (
    DuchiEstimator,
    HybridEstimator,
    OneBitMeanEstimator,
    PiecewiseEstimator,
)
from chorus_collector.estimators.krr import BinaryRREstimator, KRREstimator
from chorus_collector.estimators.laplace import LaplaceEstimator
from chorus_collector.estimators.multidim import (
    DuchiMultidimEstimator,
    HarmonyEstimator,
    HybridMultidimEstimator,
    PiecewiseMultidimEstimator,
)
from chorus_collector.estimators.pure import (
    BLHEstimator,
    DBitFlipEstimator,
    HadamardEstimator,
    LocalHashingEstimator,
    OUEEstimator,
    SubsetEstimator,
    SuccinctHistogramEstimator,
    UnaryEstimator,
)
from chorus_collector.estimators.rappor import (
    OpenRapporEstimator,
    OpenRRDecoder,
    RapporEstimator,
)
from chorus_collector.estimators.sketch import (
    CountMeanSketchEstimator,
    HadamardCountMeanSketchEstimator,
)

__all__ = ["ESTIMATORS", "Estimator", "Query", "QueryError", "estimator_for"]

ESTIMATORS: dict[str, Estimator] = {
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
        HybridMultidimEstimator(),
    )
}


def estimator_for(mechanism_name: str) -> Estimator:
    return ESTIMATORS[mechanism_name]
