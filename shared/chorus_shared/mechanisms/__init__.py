"""The mechanism registry: every mechanism Chorus offers, by its wire name.

Adding a mechanism is one module here (parameters, ε, randomizer, payload check) plus one
estimator module in ``chorus_collector.estimators`` with the same name; the tests that iterate
over :data:`REGISTRY` then cover it without new test code.
"""

from __future__ import annotations

from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms.base import Mechanism
from chorus_shared.mechanisms.duchi import Duchi
from chorus_shared.mechanisms.krr import KRR, BinaryRR
from chorus_shared.mechanisms.rappor import BasicRappor, BooleanRappor, Rappor

__all__ = ["KRR", "REGISTRY", "BasicRappor", "BinaryRR", "BooleanRappor", "Duchi", "Mechanism",
           "Rappor", "mechanism_class"]

REGISTRY: dict[str, type[Mechanism]] = {
    cls.name: cls for cls in (BinaryRR, KRR, Rappor, BasicRappor, BooleanRappor, Duchi)
}


def mechanism_class(name: object) -> type[Mechanism]:
    if not isinstance(name, str) or name not in REGISTRY:
        raise CampaignError(f"unknown mechanism {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]
