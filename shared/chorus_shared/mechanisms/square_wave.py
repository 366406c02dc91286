"""Square Wave (Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, SIGMOD 2020). MECHANISMS-2.md §1.1.

The input v ∈ [0, 1] is reported as y ∈ [−b, 1 + b] with density p on the "wave" [v − b, v + b]
and q elsewhere, p = e^ε/(2b·e^ε + 1), q = 1/(2b·e^ε + 1): the density takes only the values p
and q, so p/q = e^ε bounds every likelihood ratio. b follows the paper's closed form (the
maximiser of a mutual-information bound), never the data.

No float leaves the device: the output range is cut into ``output_buckets`` equal buckets and
the report is the index of the bucket holding y, post-processing on the device that keeps ε.
Each bucket's probability is q·w + (p − q)·|bucket ∩ wave| (w the bucket width), between q·w and
p·w for every v: exactly ε-LDP, with e^ε reached when a bucket can lie wholly inside one wave
and wholly outside another.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.errors import WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam
from chorus_shared.mechanisms.distribution import DistributionMechanism
from chorus_shared.rng import RandomSource

__all__ = ["SquareWave", "square_wave_b"]

DEFAULT_BUCKETS = 256
# Every estimate refits EM/EMS 200 times (the bootstrap), at O(D·m̃) a step: one estimate took
# 1 s at 256 buckets, 5 s at 512 and 27 s at 1024 (n = 10⁶, one core), too slow to answer a
# query. The paper's 1024-bucket setting is reproduced in benchmarks/ by building the mechanism
# directly.
MAX_SQUARE_WAVE_BUCKETS = 512


def square_wave_b(epsilon: float) -> float:
    """The wave's half-width b(ε) = (ε·e^ε − e^ε + 1)/(2e^ε·(e^ε − 1 − ε)), written with expm1 so
    that small ε does not cancel; it tends to 1/2 as ε → 0 and to 0 as ε grows."""
    growth = math.exp(epsilon)
    numerator = epsilon * growth - math.expm1(epsilon)
    denominator = 2 * growth * (math.expm1(epsilon) - epsilon)
    return min(0.5, numerator / denominator)


@dataclass(frozen=True, kw_only=True)
class SquareWave(DistributionMechanism):
    """Payload: the output bucket index, an integer in [0, output_buckets)."""

    name: ClassVar[str] = "sw"

    buckets: int = DEFAULT_BUCKETS
    output_buckets: int = DEFAULT_BUCKETS

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="buckets", help="histogram buckets over [lo, hi]", lo=2,
                 hi=MAX_SQUARE_WAVE_BUCKETS, default=DEFAULT_BUCKETS),
        # The reference code uses as many output buckets as input ones (MECHANISMS-2.md §1.1).
        IntParam(name="output_buckets", help="report buckets over [−b, 1 + b]", lo=2,
                 hi=MAX_SQUARE_WAVE_BUCKETS,
                 default=lambda eps, domain, earlier: earlier["buckets"]),
    )

    @property
    def b(self) -> float:
        return square_wave_b(self.epsilon)

    @property
    def p(self) -> float:
        """Output density on the wave [v − b, v + b]."""
        return math.exp(self.epsilon) / (2 * self.b * math.exp(self.epsilon) + 1)

    @property
    def q(self) -> float:
        """Output density elsewhere on [−b, 1 + b]."""
        return 1 / (2 * self.b * math.exp(self.epsilon) + 1)

    @property
    def bucket_width(self) -> float:
        return (1 + 2 * self.b) / self.output_buckets

    def randomize(self, x: float, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> int:
        b = self.b
        if rng.random() < 2 * b * self.p:  # on the wave, uniformly
            y = x - b + 2 * b * rng.random()
        else:  # uniformly on [−b, x − b) ∪ (x + b, 1 + b], whose length is exactly 1
            u = rng.random()
            y = u - b if u < x else u + b
        index = math.floor((y + b) / self.bucket_width)
        return min(max(index, 0), self.output_buckets - 1)

    def payload_bounds(self) -> tuple[int, int]:
        return 0, self.output_buckets - 1

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not 0 <= payload < self.output_buckets:
            raise WireError(f"an sw payload is an integer in [0, {self.output_buckets})")
        return payload

    @property
    def report_bits(self) -> int:
        return max(1, (self.output_buckets - 1).bit_length())

    def output_probability(self, payload: int, x: float) -> float:
        width = self.bucket_width
        low = -self.b + payload * width
        overlap = max(0.0, min(low + width, x + self.b) - max(low, x - self.b))
        return self.q * width + (self.p - self.q) * overlap

    def outputs(self) -> Iterable[int]:
        return range(self.output_buckets)

    def inputs(self) -> Iterable[float]:
        """Both ends, the middle and points between: ε is reached between the two ends."""
        return [i / 8 for i in range(9)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "b": self.b, "p": self.p, "q": self.q}
