"""Estimation shared by the pure frequency oracles (Wang et al. 2017, MECHANISMS.md §0.1).

A pure protocol has a support set per report; with C_v the support count of v,
f̂_v = (C_v/n − q*)/(p* − q*), with the i.i.d.-sampling standard error
(``common.pure_frequencies``). Each oracle's estimator (``unary``, ``subset``, ``hadamard``,
``succinct``, ``local_hashing``, ``dbitflip``) says how its statistic gives the support counts.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import (
    BinomialCounts,
    frequency_estimate,
    pure_frequencies,
)
from chorus_collector.estimators.consistency import Channel
from chorus_collector.results.estimates import FrequencyEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import PureOracle

P = TypeVar("P", bound=PureOracle)


class PureEstimator(Estimator[P]):
    """The support-count estimator every pure oracle shares; subclasses give the counts."""

    mechanism_type: ClassVar[MechanismTypes] = PureOracle
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "mle")

    def support_counts(self, mechanism: P, state: np.ndarray) -> np.ndarray:
        return state.astype(np.float64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        counts = self.support_counts(mechanism, state)
        frequency, std_error = self.frequencies(mechanism, n, state, counts)
        return frequency_estimate(campaign, n, frequency, std_error, query,
                                  {"variance_per_user": mechanism.approximate_variance()},
                                  channel=lambda: self.channel(mechanism),
                                  output_counts=self.output_counts(mechanism, state),
                                  support_counts=counts,
                                  likelihood=self.likelihood(mechanism, state, counts))

    def frequencies(self, mechanism: P, n: int, state: np.ndarray,
                    counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The unbiased estimate and its standard error (the pure-protocol one by default)."""
        return pure_frequencies(counts, n, *mechanism.support_probabilities())

    def likelihood(self, mechanism: P, state: np.ndarray,
                   counts: np.ndarray) -> BinomialCounts | None:
        """The counts ``mle`` fits, where they are not the support counts out of n reports."""
        return None

    def channel(self, mechanism: P) -> Channel:
        """A[y, v] = P(output y | input v) when the output histogram is sufficient (IBU)."""
        raise TypeError(f"{mechanism.name} has no output-histogram channel")

    def output_counts(self, mechanism: P, state: np.ndarray) -> np.ndarray | None:
        return None
