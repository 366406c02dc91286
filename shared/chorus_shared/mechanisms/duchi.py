"""Duchi, Jordan, Wainwright's one-bit mechanism for the mean of a bounded number.

Sources: Duchi, Jordan, Wainwright, FOCS 2013 and JASA 2018. MECHANISMS.md §9.2.

The device clips x to [lo, hi], maps it to t ∈ [−1, 1] and sends one bit b with
P(b = 1) = 1/2 + t·(e^ε − 1) / (2(e^ε + 1)). The collector reads b as t* = ±C_ε with
C_ε = (e^ε + 1)/(e^ε − 1), which is unbiased for t; Var[t* | t] = C_ε² − t².
P(b = 1) ranges over [1/(e^ε + 1), e^ε/(e^ε + 1)], so every likelihood ratio is at most e^ε,
with equality between t = 1 and t = −1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.domain import NumericRange
from chorus_shared.errors import WireError
from chorus_shared.mechanisms.base import EMPTY, Mechanism
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["Duchi", "OneBitMean"]

@dataclass(frozen=True, kw_only=True)
class Duchi(Mechanism):
    name: ClassVar[str] = "duchi"
    domain_kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    estimate_kind: ClassVar[str] = "mean"

    domain: NumericRange
    epsilon: float

    @property
    def c(self) -> float:
        """C_ε: the magnitude of the unbiased per-report value t*."""
        return (math.exp(self.epsilon) + 1) / (math.exp(self.epsilon) - 1)

    def prob_one(self, t: float) -> float:
        """P(b = 1 | t)."""
        e = math.exp(self.epsilon)
        return 0.5 + t * (e - 1) / (2 * (e + 1))

    def encode(self, value: object) -> float:
        """Clip to [lo, hi] (on the device) and map to t ∈ [−1, 1]."""
        return self.domain.to_unit(value)

    def randomize(
        self, x: float, rng: RandomSource, assignment: Mapping[str, int] = EMPTY
    ) -> int:
        return int(bernoulli(rng, self.prob_one(x)))

    def payload_bounds(self) -> tuple[int, int]:
        return 0, 1

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or payload not in (0, 1):
            raise WireError(f"a {self.name} payload is the bit 0 or 1, got {payload!r}")
        return payload

    @property
    def report_bits(self) -> int:
        return 1

    def output_probability(self, payload: int, x: float) -> float:
        p1 = self.prob_one(x)
        return p1 if payload == 1 else 1.0 - p1

    def outputs(self) -> Iterable[int]:
        return (0, 1)

    def inputs(self) -> Iterable[float]:
        # P(b | t) is affine in t, so the extreme ratios are attained at t = ±1.
        return (-1.0, -0.5, 0.0, 0.5, 1.0)

    def report_value(self, payload: int) -> float:
        """t* = ±C_ε, what one report stands for on the [−1, 1] scale."""
        return self.c * (2 * payload - 1)

    def per_report_variance(self, t: float) -> float:
        """Var[t* | t] = C_ε² − t² (fixed-population model)."""
        return self.c**2 - t**2

    def variance_bound(self, t: float) -> float:
        """An upper bound on Var[t* | t] (here exact)."""
        return self.per_report_variance(t)

    def worst_case_variance(self) -> float:
        """max_t Var[t* | t] = C_ε² (at t = 0), on the [−1, 1] scale."""
        return self.c**2

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "c": self.c, "clipping": "values outside [lo, hi] are "
                "clipped to the nearest bound on the device"}


@dataclass(frozen=True, kw_only=True)
class OneBitMean(Duchi):
    """Microsoft's 1BitMean (Ding, Kulkarni, Yekhanin, NeurIPS 2017; MECHANISMS.md §10.1).

    For x ∈ [0, m] the device sends 1 with probability 1/(e^ε + 1) + (x/m)·(e^ε − 1)/(e^ε + 1)
    and the collector estimates (m/n)·Σ (b(e^ε + 1) − 1)/(e^ε − 1). With t = 2x/m − 1 this is
    exactly Duchi et al.'s bit (the tests check the two formulas agree), so it shares Duchi's
    estimator. DKY's memoization with α-point rounding is not offered: Chorus randomizes every
    report afresh (see :mod:`chorus_shared.privacy`). Offered under its own name for
    deployments that follow DKY.
    """

    name: ClassVar[str] = "one_bit_mean"

    def dky_probability(self, x: float) -> float:
        """π(x) in DKY's own terms, for x in [lo, hi] (lo plays the role of 0, hi of m)."""
        e = math.exp(self.epsilon)
        share = (x - self.domain.lo) / (self.domain.hi - self.domain.lo)
        return 1 / (e + 1) + share * (e - 1) / (e + 1)
