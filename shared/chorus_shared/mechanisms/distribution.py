"""What every distribution mechanism shares: the grid a numeric campaign is estimated on.

A distribution campaign collects one number per report over ``[lo, hi]`` and estimates its
whole distribution (histogram, CDF, quantiles, shares in ranges) instead of only its mean. The
config states the granularity: ``buckets`` equal-width buckets of the *mapped* value
v ∈ [0, 1], on a ``linear`` scale (v = (x − lo)/(hi − lo)) or a ``log`` one
(v = ln(x/lo)/ln(hi/lo), for heavy-tailed numbers such as latencies, where a linear grid
fine enough for the median would waste most buckets on the tail). The mapping is public
pre-processing on the device and costs no ε; values outside [lo, hi] are clipped there.
MECHANISMS-2.md §1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from chorus_shared.domain import Domain, NumericRange
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms.base import Mechanism, check_params, required_epsilon

__all__ = ["SCALES", "DistributionMechanism"]

SCALES = ("linear", "log")
# A finer grid mostly adds noise (each bucket holds fewer reports) and makes every query dear:
# the hierarchy's exact covariance costs O(D²·nodes) (0.35 s at 1024 leaves, 7 s and 0.6 GB at
# 4096) and Square Wave's EM O(D·m̃) per step. The SW paper's own grid is 1024.
MAX_BUCKETS = 1024


@dataclass(frozen=True, kw_only=True)
class DistributionMechanism(Mechanism):
    """A mechanism whose collector estimates a distribution on a grid of ``buckets``."""

    domain_kinds: ClassVar[tuple[str, ...]] = ("numeric",)
    estimate_kind: ClassVar[str] = "distribution"

    domain: NumericRange
    epsilon: float
    buckets: int
    scale: str = "linear"

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        check_params(params, [*(p.name for p in cls.parameters), "scale"], cls.name)
        eps = required_epsilon(cls.name, epsilon)
        cls.check_domain(domain)
        assert isinstance(domain, NumericRange)
        scale = params.get("scale", "linear")
        if scale not in SCALES:
            raise CampaignError(f"{cls.name} parameter scale must be one of {list(SCALES)}, "
                                f"got {scale!r:.40}")
        if scale == "log" and not domain.lo > 0:
            raise CampaignError(f"a log scale needs domain.lo > 0 (got lo = {domain.lo:g}): "
                                "set lo to the smallest value worth resolving, e.g. 1 ms")
        values: dict[str, int] = {}
        for parameter in cls.parameters:
            values[parameter.name] = parameter.read(cls.name, params, eps, domain, values)
        return cls(domain=domain, epsilon=eps, scale=scale, **values)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "scale": self.scale}

    def encode(self, value: object) -> float:
        """Clip to [lo, hi] and map to v ∈ [0, 1] on the campaign's scale (on the device)."""
        return self.to_unit(self.domain.clipped(value))

    def to_unit(self, x: float) -> float:
        lo, hi = self.domain.lo, self.domain.hi
        unit = math.log(x / lo) / math.log(hi / lo) if self.scale == "log" \
            else (x - lo) / (hi - lo)
        return min(max(unit, 0.0), 1.0)

    def from_unit(self, unit: float) -> float:
        """The number at v ∈ [0, 1] (the inverse of :meth:`to_unit`)."""
        lo, hi = self.domain.lo, self.domain.hi
        if self.scale == "log":
            return lo * math.exp(unit * math.log(hi / lo))
        return lo + unit * (hi - lo)

    def edges(self) -> list[float]:
        """The buckets' edges on the campaign's own scale: ``buckets + 1`` numbers."""
        return [self.from_unit(i / self.buckets) for i in range(self.buckets + 1)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "estimates": "distribution",
                "granularity": f"{self.buckets} buckets on a {self.scale} scale over "
                               f"[{self.domain.lo:g}, {self.domain.hi:g}]",
                "clipping": "values outside [lo, hi] are clipped to the nearest bound on the "
                            "device"}
