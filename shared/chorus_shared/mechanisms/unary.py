"""Unary encoding: SUE (basic one-time RAPPOR) and OUE (Wang et al., USENIX Security 2017).

MECHANISMS.md §3. The value is one-hot encoded in d bits and every bit is perturbed on its
own: 1 with probability p if it is the true bit, q otherwise. SUE: p = e^{ε/2}/(e^{ε/2} + 1),
q = 1 − p. OUE: p = 1/2, q = 1/(e^ε + 1), which minimises the variance. ε =
ln(p(1 − q)/((1 − p)q)): two one-hot vectors differ in two bits.

The true bit is drawn with probability p *only*: pure-LDP once pre-noised it with q first
(its issue #11), making it 1 with p + (1 − p)q, which is not ε-LDP for small ε.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.errors import WireError
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, bernoulli, bernoulli_bits

__all__ = ["OUE", "SUE"]


@dataclass(frozen=True, kw_only=True)
class UnaryEncoding(PureOracle):
    """Payload ``{"bits": "<hex>"}``: bit i (1 << i) is category i."""

    @property
    @abstractmethod
    def p(self) -> float:
        """P(true bit reported as 1)."""

    @property
    @abstractmethod
    def q(self) -> float:
        """P(any other bit reported as 1)."""

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        # Every bit at q in one bit-parallel draw, then the true bit redrawn at p.
        bits = bernoulli_bits(rng, self.d, self.q) & ~(1 << x)
        if bernoulli(rng, self.p):
            bits |= 1 << x
        return {"bits": self._hex(bits)}

    def _hex(self, bits: int) -> str:
        return format(bits, f"0{(self.d + 3) // 4}x")

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"bits"}:
            raise WireError(f'a {self.name} payload is {{"bits": hex string}}')
        bits = payload["bits"]
        width = (self.d + 3) // 4
        if not isinstance(bits, str) or len(bits) != width or \
                not all(c in "0123456789abcdef" for c in bits) or int(bits, 16) >> self.d:
            raise WireError(f"bits must be {width} lowercase hex digits below 2**{self.d}")
        return {"bits": bits}

    @property
    def report_bits(self) -> int:
        return self.d

    def output_probability(self, payload: dict[str, Any], x: int) -> float:
        bits = int(payload["bits"], 16)
        prob = 1.0
        for i in range(self.d):
            rate = self.p if i == x else self.q
            prob *= rate if (bits >> i) & 1 else 1.0 - rate
        return prob

    def outputs(self) -> Iterable[dict[str, Any]]:
        if self.d > 12:
            raise TypeError("enumerating unary outputs is only sensible for d <= 12")
        return ({"bits": self._hex(b)} for b in range(1 << self.d))

    def support(self, payload: Any) -> set[int]:
        bits = int(payload["bits"], 16)
        return {i for i in range(self.d) if (bits >> i) & 1}

    def support_probabilities(self) -> tuple[float, float]:
        return self.p, self.q


@dataclass(frozen=True, kw_only=True)
class SUE(UnaryEncoding):
    name: ClassVar[str] = "sue"

    @property
    def p(self) -> float:
        z = math.exp(self.epsilon / 2)
        return z / (z + 1)

    @property
    def q(self) -> float:
        return 1 / (math.exp(self.epsilon / 2) + 1)


@dataclass(frozen=True, kw_only=True)
class OUE(UnaryEncoding):
    name: ClassVar[str] = "oue"

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return 1 / (math.exp(self.epsilon) + 1)
