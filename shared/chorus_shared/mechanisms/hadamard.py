"""Hadamard Response (Acharya, Sun, Zhang, AISTATS 2019), the variant valid for every ε.

MECHANISMS.md §7.2. K = 2^⌈log₂(d+1)⌉; category x owns C_x = {y : H_K[x+1][y] = +1}, with
H[i][j] = (−1)^popcount(i & j), half of [K]. Report y uniform on C_x with probability
e^ε/(1 + e^ε), uniform on the complement otherwise: two probability levels, ratio e^ε. Pure,
with p* = e^ε/(1 + e^ε) and q* = 1/2 (distinct rows are orthogonal). Reports are ⌈log₂ K⌉ bits
and the collector decodes all d counts at once with a fast Walsh–Hadamard transform.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.errors import WireError
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["HadamardResponse", "in_block"]


def in_block(x: int, y: int) -> bool:
    """Whether y ∈ C_x: row x + 1 of the Sylvester Hadamard matrix is +1 at column y."""
    return (((x + 1) & y).bit_count() & 1) == 0


@dataclass(frozen=True, kw_only=True)
class HadamardResponse(PureOracle):
    """Payload: one integer y in [0, K)."""

    name: ClassVar[str] = "hr"
    max_categories: ClassVar[int] = 1 << 20

    @property
    def size(self) -> int:
        """K, the Hadamard order."""
        return 1 << self.d.bit_length()  # the least power of two above d

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> int:
        # Exactly one of y and y XOR (highest bit of x + 1) lies in C_x (MECHANISMS.md §7.2).
        y = rng.randrange(self.size)
        partner = y ^ (1 << ((x + 1).bit_length() - 1))
        inside, outside = (y, partner) if in_block(x, y) else (partner, y)
        e = math.exp(self.epsilon)
        return inside if bernoulli(rng, e / (1 + e)) else outside

    def payload_bounds(self) -> tuple[int, int]:
        return 0, self.size - 1

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not 0 <= payload < self.size:
            raise WireError(f"an hr payload is an integer in [0, {self.size})")
        return payload

    @property
    def report_bits(self) -> int:
        return max(1, (self.size - 1).bit_length())

    def output_probability(self, payload: int, x: int) -> float:
        e = math.exp(self.epsilon)
        return (2 * e if in_block(x, payload) else 2.0) / (self.size * (1 + e))

    def outputs(self) -> Iterable[int]:
        return range(self.size)

    def support(self, payload: Any) -> set[int]:
        return {x for x in range(self.d) if in_block(x, payload)}

    def support_probabilities(self) -> tuple[float, float]:
        e = math.exp(self.epsilon)
        return e / (1 + e), 0.5
