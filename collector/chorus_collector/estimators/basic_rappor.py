"""Basic and boolean RAPPOR estimation: each category's share read off its own bit.

The statistic is RAPPOR's (reports, then per-bit counts; one cohort). Category v's bit is 1
with probability r1 if the user holds v and r0 otherwise, a pure protocol (MECHANISMS.md §0.1)
with p* = r1 and q* = r0, so f̂_v = (c_v/N − r0)/(r1 − r0) with the i.i.d.-sampling SE. Boolean
RAPPOR has one bit, for the second category; the first gets 1 − f̂ with the same SE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, Query
from chorus_collector.estimators.krr import frequency_estimate, pure_frequencies
from chorus_collector.estimators.rappor import RapporEstimator
from chorus_collector.results import FrequencyEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import BasicRappor, BooleanRappor, Mechanism

__all__ = ["BasicRapporEstimator", "BooleanRapporEstimator"]


class BasicRapporEstimator(Estimator):
    name: ClassVar[str] = "basic_rappor"
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "mle")

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, BasicRappor)
        return mechanism.k + 1

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        return RapporEstimator().map(mechanism, payloads)

    def _frequencies(self, mechanism: BasicRappor, n: int,
                     state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return pure_frequencies(state[1:].astype(np.float64), n, mechanism.r1, mechanism.r0)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = campaign.mechanism
        assert isinstance(mechanism, BasicRappor)
        frequency, std_error = self._frequencies(mechanism, n, state)
        return frequency_estimate(campaign, n, frequency, std_error, query, {})


class BooleanRapporEstimator(BasicRapporEstimator):
    name: ClassVar[str] = "boolean_rappor"
    postprocessing: ClassVar[tuple[str, ...]] = ("none",)  # two shares that sum to one

    def _frequencies(self, mechanism: BasicRappor, n: int,
                     state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(mechanism, BooleanRappor)
        second, se = pure_frequencies(state[1:2].astype(np.float64), n, mechanism.r1,
                                      mechanism.r0)
        return np.array([1.0 - second[0], second[0]]), np.array([se[0], se[0]])
