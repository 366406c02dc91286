"""The Piecewise Mechanism for a bounded number (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu,
ICDE 2019). MECHANISMS.md §9.4.

With z = e^{ε/2}, C = (z + 1)/(z − 1), l(t) = (C + 1)t/2 − (C − 1)/2 and r(t) = l(t) + C − 1, the
output density on [−C, C] is p = (e^ε − z)/(2z + 2) on [l(t), r(t)] and p/e^ε elsewhere: with
probability z/(z + 1) uniform on [l, r], otherwise uniform on the rest. E[t*] = t.

No float leaves the device: the continuous output is rounded to the public grid kΛ,
Λ = C/K, by *randomized* rounding (up with probability equal to the fraction), which keeps the
mean exact and turns the output into an integer k. Low-order float bits, which can betray the
input (Mironov 2012), never reach the wire. Each grid probability is an average of the density
under a triangle kernel, so every likelihood ratio stays within e^ε; it reaches e^ε at grid
points whose kernel lies inside [l(t), r(t)] and outside [l(t'), r(t')].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from chorus_shared.domain import NumericRange
from chorus_shared.errors import WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam, Mechanism
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["EPSILON_STAR", "HybridMechanism", "PiecewiseMechanism"]

DEFAULT_RESOLUTION = 1 << 16  # grid points on (0, C]: sums of k² stay within 64 bits


def _triangle_mass(a: float, b: float, center: float) -> float:
    """∫_a^b max(0, 1 − |s − center|) ds (in grid units)."""
    def primitive(s: float) -> float:  # antiderivative of the triangle, 0 at center − 1
        u = min(max(s - center, -1.0), 1.0)
        return 0.5 * (u + 1) ** 2 if u <= 0 else 0.5 + u - 0.5 * u * u
    return primitive(b) - primitive(a) if b > a else 0.0


@dataclass(frozen=True, kw_only=True)
class PiecewiseMechanism(Mechanism):
    """Payload: the integer grid index k, t* = k·C/K."""

    name: ClassVar[str] = "pm"
    domain_kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    estimate_kind: ClassVar[str] = "mean"

    domain: NumericRange
    epsilon: float
    resolution: int = DEFAULT_RESOLUTION

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="resolution", help="grid points on (0, C]", lo=4, hi=DEFAULT_RESOLUTION,
                 default=DEFAULT_RESOLUTION),
    )

    # Computed once per mechanism (it is frozen): every report and every output probability
    # reads them, and recomputing was a third of an exact enumeration's time.
    @cached_property
    def z(self) -> float:
        return math.exp(self.epsilon / 2)

    @cached_property
    def c(self) -> float:
        return (self.z + 1) / (self.z - 1)

    @cached_property
    def step(self) -> float:
        """Λ, the grid step."""
        return self.c / self.resolution

    def encode(self, value: object) -> float:
        return self.domain.to_unit(value)

    def _interval(self, t: float) -> tuple[float, float]:
        left = (self.c + 1) * t / 2 - (self.c - 1) / 2
        return left, left + self.c - 1

    def randomize(self, x: float, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> int:
        left, right = self._interval(x)
        if bernoulli(rng, self.z / (self.z + 1)):
            s = left + (right - left) * rng.random()
        else:  # uniform on [−C, l) ∪ (r, C], total length C + 1
            u = (self.c + 1) * rng.random()
            below = left + self.c
            s = -self.c + u if u < below else right + (u - below)
        position = min(max(s / self.step, -self.resolution), self.resolution)
        low = math.floor(position)
        return int(low + 1 if rng.random() < position - low else low)

    def payload_bounds(self) -> tuple[int, int]:
        return -self.resolution, self.resolution

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not -self.resolution <= payload <= self.resolution:
            raise WireError(f"a pm payload is an integer in [-{self.resolution}, "
                            f"{self.resolution}]")
        return payload

    @property
    def report_bits(self) -> int:
        return (2 * self.resolution).bit_length()

    def output_probability(self, payload: int, x: float) -> float:
        left, right = self._interval(x)
        high = (math.exp(self.epsilon) - self.z) / (2 * self.z + 2)
        low = high / math.exp(self.epsilon)
        pieces = ((-self.c, left, low), (left, right, high), (right, self.c, low))
        mass = 0.0
        for a, b, density in pieces:
            mass += density * self.step * _triangle_mass(a / self.step, b / self.step, payload)
        return mass

    def report_value(self, payload: int) -> float:
        """t* = k·Λ, what one report stands for on the [−1, 1] scale."""
        return payload * self.step

    def outputs(self) -> Iterable[int]:
        if self.resolution > 256:
            raise TypeError("enumerating pm outputs is only sensible for a coarse grid")
        return range(-self.resolution, self.resolution + 1)

    def inputs(self) -> Iterable[float]:
        return (-1.0, -0.3, 0.0, 0.7, 1.0)

    def variance_bound(self, t: float) -> float:
        """Var[t* | t] ≤ t²/(z − 1) + (z + 3)/(3(z − 1)²) (§9.4) + Λ²/4 for the rounding."""
        z = self.z
        return t * t / (z - 1) + (z + 3) / (3 * (z - 1) ** 2) + self.step**2 / 4

    def worst_case_variance(self) -> float:
        """max_t of the bound, at |t| = 1 (HM: flat in t)."""
        return max(self.variance_bound(0.0), self.variance_bound(1.0))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "c": self.c, "grid_step": self.step,
                "clipping": "values outside [lo, hi] are clipped to the nearest bound on the "
                            "device"}


EPSILON_STAR = math.log((-5 + 2 * (6353 - 405 * math.sqrt(241)) ** (1 / 3)
                         + 2 * (6353 + 405 * math.sqrt(241)) ** (1 / 3)) / 27)


@dataclass(frozen=True, kw_only=True)
class HybridMechanism(Mechanism):
    """The Hybrid Mechanism (same ICDE 2019 paper, MECHANISMS.md §9.5): the Piecewise Mechanism
    with probability α = 1 − e^{−ε/2} (for ε > ε* ≈ 0.61, else α = 0), Duchi et al.'s one bit
    otherwise. A mixture of two ε-LDP mechanisms is ε-LDP; its worst-case variance is the
    smallest of the three at every ε (§9.8).

    Payload ``[0, k]`` (a Piecewise grid index) or ``[1, b]`` (Duchi's bit). It holds its
    Piecewise part (:attr:`pm`, same ε, domain and grid) rather than being one: its payloads
    are not the Piecewise Mechanism's.
    """

    name: ClassVar[str] = "hm"
    domain_kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    estimate_kind: ClassVar[str] = "mean"

    domain: NumericRange
    epsilon: float
    resolution: int = DEFAULT_RESOLUTION

    parameters: ClassVar[tuple[IntParam, ...]] = PiecewiseMechanism.parameters

    @cached_property
    def pm(self) -> PiecewiseMechanism:
        """The Piecewise part."""
        return PiecewiseMechanism(domain=self.domain, epsilon=self.epsilon,
                                  resolution=self.resolution)

    @property
    def step(self) -> float:
        """Λ, the Piecewise part's grid step."""
        return self.pm.step

    @cached_property
    def alpha(self) -> float:
        return 1 - math.exp(-self.epsilon / 2) if self.epsilon > EPSILON_STAR else 0.0

    @cached_property
    def duchi_c(self) -> float:
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    def _duchi_one(self, t: float) -> float:
        e = math.exp(self.epsilon)
        return 0.5 + t * (e - 1) / (2 * (e + 1))

    def encode(self, value: object) -> float:
        return self.pm.encode(value)

    def randomize(self, x: float, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> list[int]:
        if bernoulli(rng, self.alpha):
            return [0, self.pm.randomize(x, rng, assignment)]
        return [1, int(bernoulli(rng, self._duchi_one(x)))]

    def check_payload(self, payload: object) -> list[int]:
        if not isinstance(payload, list) or len(payload) != 2 or payload[0] not in (0, 1) \
                or isinstance(payload[0], bool):
            raise WireError("an hm payload is [0, grid index] or [1, bit]")
        if payload[0] == 0:
            return [0, self.pm.check_payload(payload[1])]
        bit = payload[1]
        if isinstance(bit, bool) or not isinstance(bit, int) or bit not in (0, 1):
            raise WireError("an hm Duchi report is [1, 0] or [1, 1]")
        return [1, bit]

    @property
    def report_bits(self) -> int:
        return 1 + self.pm.report_bits

    def output_probability(self, payload: list[int], x: float) -> float:
        if payload[0] == 0:
            return self.alpha * self.pm.output_probability(payload[1], x)
        one = self._duchi_one(x)
        return (1 - self.alpha) * (one if payload[1] == 1 else 1 - one)

    def variance_bound(self, t: float) -> float:
        """Flat in t above ε* (§9.5): (z + 3)/(3z(z − 1)) + (e^ε + 1)²/(z(e^ε − 1)²), plus
        the rounding of the Piecewise part; Duchi's C_ε² − t² below ε*."""
        if self.alpha == 0:
            return self.duchi_c**2 - t * t
        z, e = self.pm.z, math.exp(self.epsilon)
        flat = (z + 3) / (3 * z * (z - 1)) + (e + 1) ** 2 / (z * (e - 1) ** 2)
        return flat + self.alpha * self.step**2 / 4

    def worst_case_variance(self) -> float:
        """max_t of the bound, at |t| = 1 (flat in t above ε*)."""
        return max(self.variance_bound(0.0), self.variance_bound(1.0))

    def report_value(self, payload: list[int]) -> float:
        """t* = k·Λ for a Piecewise report, ±C_ε for a Duchi bit."""
        kind, value = payload
        return value * self.step if kind == 0 else (2 * value - 1) * self.duchi_c

    def outputs(self) -> Iterable[list[int]]:
        grid = [[0, k] for k in self.pm.outputs()] if self.alpha > 0 else []
        return [*grid, [1, 0], [1, 1]]

    def inputs(self) -> Iterable[float]:
        return self.pm.inputs()

    def describe(self) -> dict[str, Any]:
        return {**self.pm.describe(), "report_bits": self.report_bits}
