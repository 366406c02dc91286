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
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, Query
from chorus_collector.estimators.consistency import (
    LABELS,
    Channel,
    KRRChannel,
    composite_mle,
    ibu,
    norm_sub,
    simplex_projection,
)
from chorus_collector.results import FrequencyEstimate, frequency_rows
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import KRR, Mechanism

__all__ = ["KRREstimator", "pure_frequencies"]

VARIANCE_MODEL_IID = "iid-sampling: plug-in binomial variance of the reported shares"


def pure_frequencies(support_counts: np.ndarray, n: int, p_star: float,
                     q_star: float) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased frequencies and their standard errors for any pure protocol (§0.1)."""
    share = support_counts / n
    frequency = (share - q_star) / (p_star - q_star)
    # The true support rate q* + (p* − q*)·f lies in [q*, p*]; clipping the plug-in there keeps
    # the variance from collapsing to 0 when a category was never (or always) reported.
    rate = np.clip(share, q_star, p_star)
    std_error = np.sqrt(rate * (1 - rate) / n) / (p_star - q_star)
    return frequency, std_error


def fixed_population_variance(n: int, frequency: float, p_star: float, q_star: float) -> float:
    """Exact Var[ĉ_v] (counts) when only the mechanism is random (model F, §0.1)."""
    gap = p_star - q_star
    return n * q_star * (1 - q_star) / gap**2 + n * frequency * (1 - p_star - q_star) / gap


def frequency_estimate(campaign: Campaign, n: int, frequency: np.ndarray,
                       std_error: np.ndarray, query: Query, extra: dict[str, Any],
                       channel: Callable[[], Channel] | None = None,
                       output_counts: np.ndarray | None = None,
                       support_counts: np.ndarray | None = None) -> FrequencyEstimate:
    """Rows for categorical estimates, post-processed as the query asks."""
    mechanism = campaign.mechanism
    labels = mechanism.domain.values  # type: ignore[union-attr]
    rows = frequency_rows(labels, frequency, std_error, n)
    method = query.postprocessing
    if method != "none":
        if method == "ibu":
            assert channel is not None and output_counts is not None
            adjusted = ibu(output_counts, channel())
        elif method == "mle":
            p_star, q_star = mechanism.support_probabilities()  # type: ignore[attr-defined]
            counts = support_counts if support_counts is not None else \
                n * (q_star + (p_star - q_star) * frequency)
            adjusted = composite_mle(counts, n, p_star, q_star)
        elif method == "norm-sub":
            adjusted = norm_sub(frequency)
        else:
            adjusted = simplex_projection(frequency)
        rows = [row.postprocessed(float(x), n) for row, x in zip(rows, adjusted, strict=True)]
        extra = {**extra, "unbiased_frequencies": [float(f) for f in frequency]}
    return FrequencyEstimate(
        campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
        rows=rows, variance_model=VARIANCE_MODEL_IID, window=query.window,
        postprocessing=LABELS.get(method, "none (unbiased)"), extra=extra,
    )


class KRREstimator(Estimator):
    name: ClassVar[str] = "krr"
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "ibu")

    def state_size(self, mechanism: Mechanism) -> int:
        assert isinstance(mechanism, KRR)
        return mechanism.d

    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, KRR)
        indices = np.fromiter(payloads, dtype=np.int64, count=len(payloads))
        return np.bincount(indices, minlength=mechanism.d).astype(np.int64)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = campaign.mechanism
        assert isinstance(mechanism, KRR)
        frequency, std_error = pure_frequencies(state.astype(np.float64), n, *mechanism.
                                                support_probabilities())
        p, q = mechanism.support_probabilities()
        return frequency_estimate(
            campaign, n, frequency, std_error, query,
            {"sum_of_frequencies": math.fsum(frequency.tolist())},
            channel=lambda: KRRChannel(mechanism.d, p, q), output_counts=state)


class BinaryRREstimator(KRREstimator):
    name: ClassVar[str] = "rr"
