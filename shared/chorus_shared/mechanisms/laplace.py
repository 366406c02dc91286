"""The Laplace mechanism for a bounded number, made discrete and sampled exactly. §9.1, §14.

The device clips x to [lo, hi], maps it to t ∈ [−1, 1] and places it on a grid of R cells,
u = (t + 1)·R/2 ∈ [0, R]. It rounds u to k ∈ {⌊u⌋, ⌈u⌉} by randomized rounding (up with
probability u − ⌊u⌋, so E[k] = u) and sends y = k + Z, where Z is discrete Laplace with scale
τ = R/ε, P(Z = z) ∝ e^{−|z|/τ}, drawn by the exact integer sampler of Canonne, Kamath and
Steinke (``chorus_shared.exact``). This is the geometric mechanism of Ghosh, Roughgarden and
Sundararajan on a grid: any two grid points are at most R apart, so every likelihood ratio is
at most e^{R/τ} = e^ε (randomized rounding mixes two such distributions and keeps the bound),
with equality between t = −1 and t = 1 in the tails. No float leaves the device, so the
floating-point attack on textbook Laplace samplers (Mironov 2012) has nothing to read.

The output is clamped to [−B, R + B] with B = ⌈40τ⌉: clamping is post-processing (ε is
unchanged), it makes the output space finite, so the privacy tests enumerate it exactly, and it
keeps sums of y² inside 64 bits. It moves the mean by less than e^{−40}·τ ≈ 4·10⁻¹⁸·τ.

The collector reads y as t* = 2y/R − 1, unbiased for t, with Var[t* | t] = (2/R)²·(w(1 − w) +
2e^{−1/τ}/(1 − e^{−1/τ})²), w the rounding fraction: about 8/ε², as for continuous Laplace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from chorus_shared.domain import NumericRange
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.exact import discrete_laplace
from chorus_shared.mechanisms.base import EMPTY, IntParam, Mechanism
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["LaplaceMechanism"]

TAIL_SCALES = 40  # clamp at 40 noise scales beyond the grid
MAX_SPAN = 46_340  # (R + 2B)² · 2³² < 2⁶³: sums of y² fit int64 for 4 billion reports a bucket
MAX_RESOLUTION = 4096
DEFAULT_RESOLUTION = 1024


def _tail(resolution: int, eps: float) -> int:
    return math.ceil(TAIL_SCALES * resolution / eps)


def _fits(resolution: int, eps: float) -> bool:
    return resolution + 2 * _tail(resolution, eps) <= MAX_SPAN


def _default_resolution(eps: float) -> int:
    """The coarsest grid that loses nothing: rounding adds at most 1/4 grid step² against
    2τ² = 2R²/ε², so the grid only has to be fine beside the noise."""
    resolution = DEFAULT_RESOLUTION
    while resolution > 1 and not _fits(resolution, eps):
        resolution //= 2
    if not _fits(resolution, eps):
        raise CampaignError(f"ε = {eps:g} is too small for laplace (the noise would not fit "
                            "64-bit sums); use duchi, whose one-bit reports have no range")
    return resolution


@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism(Mechanism):
    """Payload: the integer y ∈ [−B, R + B]."""

    name: ClassVar[str] = "laplace"
    domain_kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    estimate_kind: ClassVar[str] = "mean"

    domain: NumericRange
    epsilon: float
    resolution: int

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="resolution", help="grid steps over [lo, hi]", lo=1, hi=MAX_RESOLUTION,
                 default=lambda eps, domain, earlier: _default_resolution(eps)),
    )

    def __post_init__(self) -> None:
        if not _fits(self.resolution, self.epsilon):
            raise CampaignError(
                f"laplace resolution {self.resolution} is too fine for ε = {self.epsilon:g}: the "
                f"noise spans more than {MAX_SPAN} grid steps; choose a smaller resolution")

    @property
    def scale(self) -> Fraction:
        """τ = R/ε in grid steps, as the exact rational the sampler uses."""
        return Fraction(self.resolution) / Fraction(self.epsilon)

    @property
    def tail(self) -> int:
        """B: outputs are clamped to [−B, R + B]."""
        return _tail(self.resolution, self.epsilon)

    def encode(self, value: object) -> float:
        return self.domain.to_unit(value)

    def _position(self, t: float) -> tuple[int, float]:
        """(⌊u⌋, u − ⌊u⌋) for u = (t + 1)·R/2."""
        u = min(max((t + 1) * self.resolution / 2, 0.0), float(self.resolution))
        low = min(math.floor(u), self.resolution)
        return low, u - low

    def randomize(self, x: float, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> int:
        low, fraction = self._position(x)
        k = low + 1 if bernoulli(rng, fraction) else low
        y = k + discrete_laplace(rng, self.scale)
        return min(max(y, -self.tail), self.resolution + self.tail)

    def payload_bounds(self) -> tuple[int, int]:
        return -self.tail, self.resolution + self.tail

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not -self.tail <= payload <= self.resolution + self.tail:
            raise WireError(f"a laplace payload is an integer in [{-self.tail}, "
                            f"{self.resolution + self.tail}]")
        return payload

    @property
    def report_bits(self) -> int:
        return (self.resolution + 2 * self.tail).bit_length()

    def report_value(self, payload: int) -> float:
        """t* = 2y/R − 1, what one report stands for on the [−1, 1] scale."""
        return 2 * payload / self.resolution - 1

    def _noise_probability(self, y: int, k: int) -> float:
        """P(clamp(k + Z) = y)."""
        decay = math.exp(-self.epsilon / self.resolution)  # e^{−1/τ}
        if y <= -self.tail:
            return decay ** (k + self.tail) / (1 + decay)
        if y >= self.resolution + self.tail:
            return decay ** (self.resolution + self.tail - k) / (1 + decay)
        return (1 - decay) / (1 + decay) * decay ** abs(y - k)

    def output_probability(self, payload: int, x: float) -> float:
        low, fraction = self._position(x)
        probability = (1 - fraction) * self._noise_probability(payload, low)
        if fraction > 0:
            probability += fraction * self._noise_probability(payload, low + 1)
        return probability

    def outputs(self) -> Iterable[int]:
        if self.resolution + 2 * self.tail > 1 << 14:
            raise TypeError("enumerating laplace outputs is only sensible for a coarse grid")
        return range(-self.tail, self.resolution + self.tail + 1)

    def inputs(self) -> Iterable[float]:
        return (-1.0, -0.3, 0.0, 0.7, 1.0)

    def noise_variance(self) -> float:
        """Var[Z] = 2e^{−1/τ}/(1 − e^{−1/τ})² in grid steps² (clamping aside)."""
        decay = math.exp(-self.epsilon / self.resolution)
        return 2 * decay / (1 - decay) ** 2

    def per_report_variance(self, t: float) -> float:
        """Var[t* | t] on the [−1, 1] scale: rounding plus noise."""
        _, fraction = self._position(t)
        return (2 / self.resolution) ** 2 * (fraction * (1 - fraction) + self.noise_variance())

    def variance_bound(self, t: float) -> float:
        """Var[t* | t] ≤ noise plus the largest rounding variance (1/4 grid step²)."""
        return (2 / self.resolution) ** 2 * (0.25 + self.noise_variance())

    def worst_case_variance(self) -> float:
        return self.variance_bound(0.0)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "noise": "discrete Laplace, sampled exactly with "
                "integers (Canonne, Kamath, Steinke 2020)", "scale": float(self.scale),
                "clipping": "values outside [lo, hi] are clipped to the nearest bound on the "
                            "device"}
