"""k-RR and Warner RR estimation (MECHANISMS.md §1–2).

The statistic is the histogram of reported indices. With λ̂_v = N_v / n the reported share of
category v, f̂_v = (λ̂_v − q)/(p − q) is unbiased, and Σ_v f̂_v = 1 exactly.

Standard error: under i.i.d. sampling of users each report equals v independently with
probability λ_v, so Var[f̂_v] = λ_v(1 − λ_v) / (n (p − q)²), estimated by plugging in λ̂_v.
This is the fixed-population variance plus the sampling term f(1 − f)/n (MECHANISMS.md §0),
the right one for inference about the population the users were drawn from. λ̂ is clipped to
[q, p], where every true rate lies, so a category nobody reported still has a positive SE.

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query
from chorus_collector.estimators.common import frequency_estimate, pure_frequencies
from chorus_collector.estimators.consistency import KRRChannel
from chorus_collector.results.estimates import FrequencyEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import KRR


class KRREstimator(Estimator[KRR]):
    name: ClassVar[str] = "krr"
    mechanism_type: ClassVar[MechanismTypes] = KRR
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def state_size(self, mechanism: KRR) -> int:
        return mechanism.d

    def map(self, mechanism: KRR, payloads: Sequence[Any]) -> np.ndarray:
        indices = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(indices, minlength=mechanism.d).astype(np.int64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        frequency, std_error = pure_frequencies(state.astype(np.float64), n, *mechanism.
                                                support_probabilities())
        p, q = mechanism.support_probabilities()
        return frequency_estimate(
            campaign, n, frequency, std_error, query,
            {"sum_of_frequencies": math.fsum(frequency.tolist())},
            channel=lambda: KRRChannel(mechanism.d, p, q), output_counts=state)


class BinaryRREstimator(KRREstimator):
    name: ClassVar[str] = "rr"
