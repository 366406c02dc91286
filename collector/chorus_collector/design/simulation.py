"""One simulated time window for the campaign designer: users drawn from a distribution, their
reports, and the real estimator's answer (``map`` then ``finalize``, as the fold and the API
run them).

Reports come from the vectorized simulator (:mod:`chorus_collector.design.simulate`) where it
has the mechanism, else from the client's own randomizer in Python, which is slower: so at most
:data:`MAX_SIMULATED_USERS` users (and :data:`MAX_SIMULATED_BITS` reported bits) are
simulated with the first and :data:`MAX_RANDOMIZER_USERS` with the second, and the answer
says how many.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from chorus_collector.design.request import DesignRequest, Distribution
from chorus_collector.design.simulate import SIMULATORS, simulate
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.kinds import kind_of_answer
from chorus_collector.results.estimates import FrequencyEstimate, MeanEstimate, VectorMeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.domain import Categories, NumericRange, NumericVector

__all__ = ["MAX_RANDOMIZER_USERS", "MAX_SIMULATED_BITS", "MAX_SIMULATED_USERS",
           "SimulatedWindow", "estimate_rows", "simulate_window", "true_values", "unit_points"]

#: A million vectorized reports take about a second to draw and decode (k-RR, OUE at d ≤ 64).
MAX_SIMULATED_USERS = 10**6
#: Bit-vector reports (OUE, SUE, RAPPOR) are drawn as an n × bits matrix: 64 million bits take
#: about 3 s and 64 MB (OUE at d = 64 and 10^6 users; at d = 1024, 62,500 users).
MAX_SIMULATED_BITS = 64 * 10**6
#: The client's randomizer runs at 10–50 µs a report in Python: well under a second here.
MAX_RANDOMIZER_USERS = 20_000


@dataclass(frozen=True)
class SimulatedWindow:
    users: int
    simulator: str  # "vectorized" or "client randomizer"
    cap: int  # the most users that simulator is asked for
    result: FrequencyEstimate | MeanEstimate | VectorMeanEstimate


def unit_points(request: DesignRequest, distribution: Distribution) -> np.ndarray:
    """The distribution's values on the mechanisms' input scale: category indices, t ∈ [−1, 1]
    (one column per attribute for a vector), or the strings themselves."""
    domain = request.domain
    if isinstance(domain, Categories):
        return np.array([domain.index(v) for v in distribution.values], dtype=np.int64)
    if isinstance(domain, NumericRange | NumericVector):
        return np.array([domain.to_unit(v) for v in distribution.values], dtype=np.float64)
    return np.array(distribution.values, dtype=object)


def true_values(request: DesignRequest, distribution: Distribution) -> list[float]:
    """The population's truth: each category's share, or each attribute's mean."""
    domain = request.domain
    if isinstance(domain, Categories):
        shares = dict(zip(distribution.values, distribution.weights, strict=True))
        return [shares.get(v, 0.0) for v in domain.values]
    if request.kind == "strings":
        return list(distribution.weights)
    values = np.array(distribution.values, dtype=np.float64)
    weights = np.array(distribution.weights)
    mean = weights @ values
    return [float(mean)] if values.ndim == 1 else [float(x) for x in mean]


def simulate_window(request: DesignRequest, campaign: Campaign, distribution: Distribution,
                    seed: int) -> SimulatedWindow:
    """``request.users`` users (capped) drawn i.i.d. from ``distribution``, one report each."""
    mechanism = campaign.mechanism
    vectorized = mechanism.name in SIMULATORS
    cap = min(MAX_SIMULATED_USERS, max(1, MAX_SIMULATED_BITS // mechanism.report_bits)) \
        if vectorized else MAX_RANDOMIZER_USERS
    users = min(request.users, cap)
    rng = np.random.default_rng(seed)
    points = unit_points(request, distribution)
    inputs = points[rng.choice(len(points), size=users, p=np.array(distribution.weights))]
    if vectorized:
        payloads = simulate(mechanism, inputs, rng)
    else:
        client_rng = random.Random(seed)
        payloads = [mechanism.randomize(x, client_rng) for x in _python_values(inputs)]
    estimator = estimator_for(mechanism.name)
    state = estimator.map(mechanism, payloads)
    query = Query(candidates=tuple(distribution.values)) if request.kind == "strings" \
        else Query()
    result = estimator.finalize(campaign, users, state, query)
    # Distributions and records are not offered by the designer.
    if not isinstance(result, FrequencyEstimate | MeanEstimate | VectorMeanEstimate):
        raise TypeError("the designer does not simulate distribution or record campaigns")
    return SimulatedWindow(users=users, simulator="vectorized" if vectorized
                           else "client randomizer", cap=cap, result=result)


def _python_values(inputs: np.ndarray) -> list[Any]:
    """numpy rows as the client's inputs: int, float, tuple of floats or str."""
    if inputs.ndim == 2:
        return [tuple(float(x) for x in row) for row in inputs]
    values: list[Any] = inputs.tolist()
    return values


def estimate_rows(result: FrequencyEstimate | MeanEstimate | VectorMeanEstimate,
                  ) -> list[dict[str, Any]]:
    """label, estimate, std_error, ci_low, ci_high per category, mean or attribute."""
    return [{"label": label, "estimate": one.estimate, "std_error": one.std_error,
             "ci_low": one.ci_low, "ci_high": one.ci_high}
            for label, one in kind_of_answer(result).value_estimates(result).items()]
