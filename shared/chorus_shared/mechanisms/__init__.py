"""The mechanism registry: every mechanism Chorus offers, by its wire name.

Adding a mechanism is one module here (parameters, ε, randomizer, payload check) plus one
estimator module in ``chorus_collector.estimators`` with the same name; the tests that iterate
over :data:`REGISTRY` then cover it without new test code.
"""

from __future__ import annotations

from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms.base import Mechanism
from chorus_shared.mechanisms.dbitflip import DBitFlip
from chorus_shared.mechanisms.discovery import PEM, PrefixDiscovery, TreeHist
from chorus_shared.mechanisms.duchi import Duchi, OneBitMean
from chorus_shared.mechanisms.hadamard import HadamardResponse
from chorus_shared.mechanisms.hierarchical import HierarchicalHistogram
from chorus_shared.mechanisms.krr import KRR, BinaryRR
from chorus_shared.mechanisms.laplace import LaplaceMechanism
from chorus_shared.mechanisms.local_hashing import BLH, OLH
from chorus_shared.mechanisms.multidim import (
    DuchiMultidim,
    Harmony,
    HybridMultidim,
    PiecewiseMultidim,
    SampledAttributes,
)
from chorus_shared.mechanisms.open_alphabet import OpenRappor, OpenRR
from chorus_shared.mechanisms.piecewise import HybridMechanism, PiecewiseMechanism
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.mechanisms.rappor import BasicRappor, BooleanRappor, Rappor
from chorus_shared.mechanisms.record import (
    Marginals,
    RandomSamplingFakeData,
    RecordMechanism,
    SampledAttribute,
    SplitBudget,
)
from chorus_shared.mechanisms.sketch import CountMeanSketch, HadamardCountMeanSketch
from chorus_shared.mechanisms.square_wave import SquareWave
from chorus_shared.mechanisms.subset import SubsetSelection
from chorus_shared.mechanisms.succinct import SuccinctHistogram
from chorus_shared.mechanisms.unary import OUE, SUE

__all__ = [
    "BLH",
    "DISCOVERY_MECHANISMS",
    "KRR",
    "OLH",
    "OUE",
    "PEM",
    "REGISTRY",
    "STRING_MECHANISMS",
    "SUE",
    "BasicRappor",
    "BinaryRR",
    "BooleanRappor",
    "CountMeanSketch",
    "DBitFlip",
    "Duchi",
    "DuchiMultidim",
    "HadamardCountMeanSketch",
    "HadamardResponse",
    "Harmony",
    "HierarchicalHistogram",
    "HybridMechanism",
    "HybridMultidim",
    "LaplaceMechanism",
    "Marginals",
    "Mechanism",
    "OneBitMean",
    "OpenRR",
    "OpenRappor",
    "PiecewiseMechanism",
    "PiecewiseMultidim",
    "PrefixDiscovery",
    "PureOracle",
    "RandomSamplingFakeData",
    "Rappor",
    "RecordMechanism",
    "SampledAttribute",
    "SampledAttributes",
    "SplitBudget",
    "SquareWave",
    "SubsetSelection",
    "SuccinctHistogram",
    "TreeHist",
    "mechanism_class",
]

REGISTRY: dict[str, type[Mechanism]] = {
    cls.name: cls for cls in (
        BinaryRR, KRR, SUE, OUE, BLH, OLH, SubsetSelection, HadamardResponse,
        SuccinctHistogram, DBitFlip, Rappor, BasicRappor, BooleanRappor, OpenRR, OpenRappor,
        CountMeanSketch, HadamardCountMeanSketch,
        Duchi, OneBitMean, PiecewiseMechanism, HybridMechanism, LaplaceMechanism,
        DuchiMultidim, Harmony, PiecewiseMultidim, HybridMultidim,
        SquareWave, HierarchicalHistogram,
        SampledAttribute, SplitBudget, RandomSamplingFakeData, Marginals,
        PEM, TreeHist,
    )
}


#: The mechanisms over open strings, decoded against candidates at query time.
STRING_MECHANISMS: tuple[str, ...] = tuple(
    name for name, cls in REGISTRY.items() if "strings" in cls.domain_kinds)

#: The mechanisms that discover frequent strings themselves (candidates optional).
DISCOVERY_MECHANISMS: tuple[str, ...] = tuple(
    name for name, cls in REGISTRY.items() if issubclass(cls, PrefixDiscovery))


def mechanism_class(name: object) -> type[Mechanism]:
    if not isinstance(name, str) or name not in REGISTRY:
        raise CampaignError(f"unknown mechanism {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]
