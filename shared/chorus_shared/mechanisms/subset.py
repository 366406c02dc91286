"""Subset Selection (Ye and Barg, IEEE Trans. Inf. Theory 2018; Wang et al. 2016).

MECHANISMS.md §8. Report a subset S of ω categories: P(S | x) = e^ε/Z if x ∈ S, 1/Z otherwise,
Z = C(d−1, ω−1)·e^ε + C(d−1, ω). Sampled as: include x with probability ωe^ε/(ωe^ε + d − ω),
then fill S with distinct uniform categories other than x. ω minimises the exact Var*
q*(1 − q*)/(p* − q*)² over 1 ≤ ω < d (a scan, not a rounded formula: rounding d/(e^ε + 1) can
be worse than ω = 1). ω = 1 is k-RR.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any, ClassVar

from chorus_shared.domain import MAX_CATEGORIES, Categories, Domain
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["SubsetSelection", "best_omega", "subset_support_probabilities"]


def subset_support_probabilities(d: int, omega: int, eps: float) -> tuple[float, float]:
    e = math.exp(eps)
    p_star = omega * e / (omega * e + d - omega)
    q_star = (omega * (omega - 1) * e + omega * (d - omega)) / ((d - 1) * (omega * e + d - omega))
    return p_star, q_star


def best_omega(d: int, eps: float) -> int:
    """The ω in [1, d − 1] with the least Var* (ties: the smallest, the shortest report)."""
    def variance(omega: int) -> float:
        p_star, q_star = subset_support_probabilities(d, omega, eps)
        return q_star * (1 - q_star) / (p_star - q_star) ** 2

    return min(range(1, d), key=lambda omega: (variance(omega), omega))


def _size(domain: Domain) -> int:
    assert isinstance(domain, Categories)  # check_domain ran before any default
    return domain.size


@dataclass(frozen=True, kw_only=True)
class SubsetSelection(PureOracle):
    """Payload: the sorted list of the ω reported category indices."""

    name: ClassVar[str] = "ss"

    omega: int = 1

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="omega", help="subset size, below d", lo=1, hi=MAX_CATEGORIES,
                 default=lambda eps, domain, earlier: best_omega(_size(domain), eps)),
    )

    def __post_init__(self) -> None:
        if not self.omega < self.d:
            raise CampaignError(f"ss parameter omega must be an integer in [1, {self.d})")

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> list[int]:
        e = math.exp(self.epsilon)
        include = bernoulli(rng, self.omega * e / (self.omega * e + self.d - self.omega))
        others = rng.sample(range(self.d - 1), self.omega - 1 if include else self.omega)
        chosen = [o + 1 if o >= x else o for o in others]  # skip x
        if include:
            chosen.append(x)
        return sorted(chosen)

    def check_payload(self, payload: object) -> list[int]:
        if not isinstance(payload, list) or len(payload) != self.omega or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.d
                for i in payload):
            raise WireError(f"an ss payload is a list of {self.omega} category indices")
        if payload != sorted(set(payload)):
            raise WireError("ss indices must be distinct and sorted")
        return list(payload)

    @property
    def report_bits(self) -> int:
        return self.omega * max(1, (self.d - 1).bit_length())

    def output_probability(self, payload: list[int], x: int) -> float:
        e = math.exp(self.epsilon)
        z = math.comb(self.d - 1, self.omega - 1) * e + math.comb(self.d - 1, self.omega)
        return (e if x in payload else 1.0) / z

    def outputs(self) -> Iterable[list[int]]:
        if math.comb(self.d, self.omega) > 1 << 16:
            raise TypeError("too many subsets to enumerate")
        return (list(c) for c in combinations(range(self.d), self.omega))

    def support(self, payload: Any) -> set[int]:
        return set(payload)

    def support_probabilities(self) -> tuple[float, float]:
        return subset_support_probabilities(self.d, self.omega, self.epsilon)
