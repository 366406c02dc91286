"""k-ary randomized response (k-RR, GRR, "direct encoding") and Warner's binary RR.

Sources: Kairouz, Bonawitz, Ramage, ICML 2016; Wang, Blocki, Li, Jha, USENIX Security 2017;
Warner, JASA 1965 (the d = 2 case). MECHANISMS.md §1–2.

Keep the true index with p = e^ε / (e^ε + d − 1); otherwise report one of the *other* d − 1
indices uniformly (each with q = 1 / (e^ε + d − 1)). Drawing the lie from all d values would
change p. ε = ln(p / q) exactly: P(y | x) takes only the values p and q.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.domain import MAX_CATEGORIES, Categories, Domain
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["KRR", "BinaryRR"]


@dataclass(frozen=True, kw_only=True)
class KRR(PureOracle):
    """k-RR over a closed list of categories; the report is one category index."""

    name: ClassVar[str] = "krr"
    max_categories: ClassVar[int] = MAX_CATEGORIES

    @property
    def p(self) -> float:
        """P(report = true index)."""
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.d - 1)

    @property
    def q(self) -> float:
        """P(report = a given other index)."""
        return 1.0 / (math.exp(self.epsilon) + self.d - 1)


    def randomize(
        self, x: int, rng: RandomSource, assignment: Mapping[str, int] = EMPTY
    ) -> int:
        if bernoulli(rng, self.p):
            return x
        lie = rng.randrange(self.d - 1)  # uniform over the d − 1 other indices
        return lie + 1 if lie >= x else lie

    def payload_bounds(self) -> tuple[int, int]:
        return 0, self.d - 1

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int):
            raise WireError(f"a {self.name} payload is a category index (integer)")
        if not 0 <= payload < self.d:
            raise WireError(f"category index {payload} is outside [0, {self.d})")
        return payload

    @property
    def report_bits(self) -> int:
        return max(1, (self.d - 1).bit_length())

    def output_probability(self, payload: int, x: int) -> float:
        return self.p if payload == x else self.q

    def outputs(self) -> Iterable[int]:
        return range(self.d)

    def support(self, payload: Any) -> set[int]:
        return {payload}

    def support_probabilities(self) -> tuple[float, float]:
        """(p*, q*) of the pure-protocol framework (MECHANISMS.md §0.1): Support(y) = {y}."""
        return self.p, self.q

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "p": self.p, "q": self.q}


@dataclass(frozen=True, kw_only=True)
class BinaryRR(KRR):
    """Warner's randomized response: k-RR over exactly two categories.

    Report the true answer with p = e^ε / (1 + e^ε), the other one otherwise.
    """

    name: ClassVar[str] = "rr"

    @classmethod
    def check_domain(cls, domain: Domain) -> None:
        if isinstance(domain, Categories) and domain.size != 2:
            raise CampaignError(
                f"mechanism 'rr' needs exactly 2 categories, got {domain.size}; use 'krr'"
            )
        super().check_domain(domain)

    def encode(self, value: object) -> int:
        # A boolean maps to (first category, second category) = (False, True).
        if isinstance(value, bool):
            return int(value)
        return super().encode(value)
