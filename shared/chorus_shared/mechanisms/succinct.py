"""S-Hist, Bassily and Smith's succinct-histogram frequency oracle (STOC 2015). §7.1.

Each report holds one row index j of a public ±1 matrix Φ and one randomized-response bit:
the user takes φ = Φ[j, x] and sends its sign, kept with probability e^ε/(e^ε + 1) and flipped
otherwise. The collector estimates f̂_v = C_ε·(1/n)·Σ_u z_u·Φ[j_u, v], with z_u = ±1 and
C_ε = (e^ε + 1)/(e^ε − 1).

The paper draws Φ at random; then f̂ is unbiased only on average over the draw of Φ, and for
the one Φ a deployment fixes, two categories whose columns happen to correlate bias each
other's estimates. Chorus takes Φ = columns 1..d of the Sylvester Hadamard matrix H_K
(K = 2^⌈log₂(d+1)⌉), whose columns are exactly orthogonal and balanced: the estimate is exactly
unbiased for the fixed matrix, and the collector decodes all d categories with one fast
Walsh–Hadamard transform. The row j is drawn uniformly by the client for every report (the
paper's public coins), so a report is ⌈log₂ K⌉ + 1 bits.

As a pure protocol, Support((j, b)) = {v : Φ[j, v] = b}, with p* = e^ε/(e^ε + 1) and, since two
distinct columns agree on exactly half of the rows, q* = 1/2: the same variance as Hadamard
Response and BLH, [(e^ε + 1)²/(e^ε − 1)² − f_v]/n, from one bit plus a public row index.
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

__all__ = ["SuccinctHistogram", "hadamard_sign"]


def hadamard_sign(row: int, column: int) -> int:
    """H_K[row][column] as 1 (+1) or 0 (−1): (−1)^popcount(row & column)."""
    return 1 - ((row & column).bit_count() & 1)


@dataclass(frozen=True, kw_only=True)
class SuccinctHistogram(PureOracle):
    """Payload ``{"j": row in [0, K), "b": 0 or 1}``; category v is column v + 1 of H_K."""

    name: ClassVar[str] = "shist"
    max_categories: ClassVar[int] = 1 << 20

    @property
    def size(self) -> int:
        """K, the Hadamard order: the least power of two above d (column 0 is never used)."""
        return 1 << self.d.bit_length()

    @property
    def keep(self) -> float:
        e = math.exp(self.epsilon)
        return e / (1 + e)

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, int]:
        row = rng.randrange(self.size)
        sign = hadamard_sign(row, x + 1)
        return {"j": row, "b": sign if bernoulli(rng, self.keep) else 1 - sign}

    def check_payload(self, payload: object) -> dict[str, int]:
        if not isinstance(payload, dict) or set(payload) != {"j", "b"}:
            raise WireError('an shist payload is {"j": row, "b": bit}')
        row, bit = payload["j"], payload["b"]
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self.size:
            raise WireError(f"shist row j must be an integer in [0, {self.size})")
        if isinstance(bit, bool) or not isinstance(bit, int) or bit not in (0, 1):
            raise WireError("shist bit b must be 0 or 1")
        return {"j": row, "b": bit}

    @property
    def report_bits(self) -> int:
        return max(1, (self.size - 1).bit_length()) + 1

    def output_probability(self, payload: dict[str, int], x: int) -> float:
        agrees = hadamard_sign(payload["j"], x + 1) == payload["b"]
        return (self.keep if agrees else 1 - self.keep) / self.size

    def outputs(self) -> Iterable[dict[str, int]]:
        return ({"j": row, "b": bit} for row in range(self.size) for bit in (0, 1))

    def support(self, payload: Any) -> set[int]:
        return {v for v in range(self.d) if hadamard_sign(payload["j"], v + 1) == payload["b"]}

    def support_probabilities(self) -> tuple[float, float]:
        return self.keep, 0.5
