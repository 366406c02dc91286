"""Pure frequency oracles (Wang, Blocki, Li, Jha, USENIX Security 2017; MECHANISMS.md §0.1).

A report y names a support set Support(y) of categories, with P(v ∈ Support(Y) | x = v) = p*
and P(v ∈ Support(Y) | x ≠ v) = q*. Every such mechanism shares the estimator
f̂_v = (C_v/n − q*)/(p* − q*), where C_v counts the reports whose support holds v, and its
exact variance. :class:`PureOracle` is the common base: category domain, ε-only parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from chorus_shared.domain import Categories, Domain
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms.base import Mechanism

__all__ = ["MAX_ENUMERATED_OUTPUTS", "PureOracle"]

MAX_ENUMERATED_OUTPUTS = 1 << 16


@dataclass(frozen=True, kw_only=True)
class PureOracle(Mechanism):
    domain_kinds: ClassVar[tuple[str, ...]] = ("categories",)
    estimate_kind: ClassVar[str] = "frequency"
    #: The largest domain this oracle accepts (report size or server cost grows with d).
    max_categories: ClassVar[int] = 4096

    domain: Categories
    epsilon: float

    @classmethod
    def check_domain(cls, domain: Domain) -> None:
        super().check_domain(domain)
        if not isinstance(domain, Categories) or domain.size < 2:
            raise CampaignError(f"mechanism {cls.name!r} needs at least 2 categories")
        if domain.size > cls.max_categories:
            raise CampaignError(
                f"mechanism {cls.name!r} takes at most {cls.max_categories} categories")

    # Computed once per (frozen) mechanism: every report's randomizer and every output
    # probability reads it.
    @cached_property
    def d(self) -> int:
        return self.domain.size

    def encode(self, value: object) -> int:
        return self.domain.encode(value)

    def inputs(self) -> Iterable[int]:
        return range(self.d)

    def support(self, payload: Any) -> set[int]:
        """The categories a report supports."""
        raise TypeError(f"{self.name} does not define its support")

    def support_probabilities(self) -> tuple[float, float]:
        """(p*, q*)."""
        raise TypeError(f"{self.name} does not define p* and q*")

    def approximate_variance(self) -> float:
        """Var*: n·Var[f̂_v] with f_v → 0, q*(1 − q*)/(p* − q*)² (for choosing parameters)."""
        p_star, q_star = self.support_probabilities()
        return q_star * (1 - q_star) / (p_star - q_star) ** 2

    def describe(self) -> dict[str, Any]:
        p_star, q_star = self.support_probabilities()
        return {**super().describe(), "p_star": p_star, "q_star": q_star,
                "variance_per_user": self.approximate_variance()}


def binomial(n: int, k: int) -> int:
    return math.comb(n, k)
