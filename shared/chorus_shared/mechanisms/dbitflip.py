"""dBitFlip for histograms (Ding, Kulkarni, Yekhanin, NeurIPS 2017). MECHANISMS.md §10.2.

The client samples b distinct buckets out of the d categories uniformly (independently of its
value) and sends one bit per sampled bucket j: 1 with probability e^{ε/2}/(e^{ε/2} + 1) if its
value is j, 1/(e^{ε/2} + 1) otherwise. Two values change at most two bits' distributions, each
by e^{ε/2}: ε-LDP, with equality when both buckets are sampled. With b = 1 no report holds both
buckets, so the bit uses e^ε instead and the claim stays tight.

As a pure protocol, Support(report) = the sampled buckets whose bit is 1, with
p* = (b/d)·e^{ε/2}/(e^{ε/2} + 1) and q* = (b/d)/(e^{ε/2} + 1). The collector uses DKY's own
estimator, which conditions on how often each bucket was sampled and so has a lower variance
than the pure-protocol one (both are unbiased). With b = d it is SUE.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations, product
from typing import Any, ClassVar

from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, uniforms

__all__ = ["DBitFlip"]

MAX_SAMPLED = 1000


@dataclass(frozen=True, kw_only=True)
class DBitFlip(PureOracle):
    """Payload ``{"buckets": [sorted indices], "bits": [0/1 per bucket]}``."""

    name: ClassVar[str] = "dbitflip"

    b: int = 1

    # Each sampled bucket costs its index and its bit on the wire; beyond 1000 a report would
    # outgrow the collector's 8 KiB payload limit.
    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="b", help="sampled buckets", lo=1, hi=MAX_SAMPLED, default=1),
    )

    def __post_init__(self) -> None:
        if self.b > self.d:
            raise CampaignError(f"dbitflip parameter b must be an integer in [1, {self.d}]")

    # Computed once per (frozen) mechanism: each bit of a report, and each output
    # probability, reads them.
    @cached_property
    def odds(self) -> float:
        """z = p_bit/(1 − p_bit) = e^{ε/2} (e^ε when b = 1), computed without cancellation."""
        return math.exp(self.epsilon / min(self.b, 2))

    @cached_property
    def p_bit(self) -> float:
        """Two values change two bits' distributions only if both buckets are sampled; with
        b = 1 a report holds one of them at most, so each bit may spend all of ε."""
        return self.odds / (self.odds + 1)

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        buckets = sorted(rng.sample(range(self.d), self.b))
        bits = [int(u < (self.p_bit if j == x else 1 - self.p_bit))
                for j, u in zip(buckets, uniforms(rng, self.b), strict=True)]
        return {"buckets": buckets, "bits": bits}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"buckets", "bits"}:
            raise WireError('a dbitflip payload is {"buckets": [...], "bits": [...]}')
        buckets, bits = payload["buckets"], payload["bits"]
        if not isinstance(buckets, list) or len(buckets) != self.b or not all(
                isinstance(j, int) and not isinstance(j, bool) and 0 <= j < self.d
                for j in buckets) or buckets != sorted(set(buckets)):
            raise WireError(f"buckets must be {self.b} distinct sorted indices below {self.d}")
        if not isinstance(bits, list) or len(bits) != self.b or not all(
                isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in bits):
            raise WireError(f"bits must be {self.b} values of 0 or 1")
        return {"buckets": list(buckets), "bits": list(bits)}

    @property
    def report_bits(self) -> int:
        return self.b * (1 + max(1, (self.d - 1).bit_length()))

    def output_probability(self, payload: dict[str, Any], x: int) -> float:
        prob = 1.0 / math.comb(self.d, self.b)  # the buckets are independent of x
        for j, bit in zip(payload["buckets"], payload["bits"], strict=True):
            rate = self.p_bit if j == x else 1 - self.p_bit
            prob *= rate if bit else 1 - rate
        return prob

    def outputs(self) -> Iterable[dict[str, Any]]:
        if math.comb(self.d, self.b) * 2**self.b > 1 << 16:
            raise TypeError("too many dbitflip outputs to enumerate")
        return ({"buckets": list(buckets), "bits": list(bits)}
                for buckets in combinations(range(self.d), self.b)
                for bits in product((0, 1), repeat=self.b))

    def support(self, payload: Any) -> set[int]:
        return {j for j, bit in zip(payload["buckets"], payload["bits"], strict=True) if bit}

    def support_probabilities(self) -> tuple[float, float]:
        share = self.b / self.d
        return share * self.p_bit, share * (1 - self.p_bit)

    def approximate_variance(self) -> float:
        """Var* of DKY's estimator, which the collector uses: (d/b)·z/(z − 1)², z the odds of
        one bit (below the pure-protocol Var*, which does not condition on the sampling)."""
        z = self.odds
        return self.d / self.b * z / (z - 1) ** 2
