"""Mean estimation for several bounded numbers at once (a ``vector`` domain of D attributes).

* ``duchi_md``: Duchi, Jordan, Wainwright's multidimensional mechanism (MECHANISMS.md §9.3):
  one sign vector s ∈ {±1}^D standing for B·s.
* ``harmony``: Nguyen et al.'s Harmony (§9.6): one attribute j drawn uniformly, Duchi's bit on
  t_j at the full ε, standing for D·C_ε·(±1) at coordinate j.
* ``pm_md`` and ``hm_md``: Wang et al.'s attribute sampling (ICDE 2019, §9.7): k of the D
  attributes drawn uniformly, each perturbed by the Piecewise (or Hybrid) Mechanism at ε/k and
  scaled by D/k, with k = max(1, min(D, ⌊ε/2.5⌋)) unless the campaign sets it.

Every report stands for a vector t* with E[t* | t] = t, so the mean of the reports is unbiased
for the mean vector. Values are clipped to each attribute's [lo, hi] on the device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations, product
from typing import Any, ClassVar, Self

from chorus_shared.domain import Domain, NumericRange, NumericVector
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY, Mechanism, check_params, required_epsilon
from chorus_shared.mechanisms.duchi import Duchi
from chorus_shared.mechanisms.piecewise import HybridMechanism, PiecewiseMechanism
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["DuchiMultidim", "Harmony", "HybridMultidim", "PiecewiseMultidim",
           "SampledAttributes", "duchi_md_scale"]

UNIT = NumericRange(-1.0, 1.0)
MAX_ENUMERATED_DIMENSIONS = 12


def duchi_md_scale(dimensions: int) -> float:
    """C_D = 2^{D−1}/C(D−1, ⌊D/2⌋): the scale that makes B·s unbiased (see the class)."""
    return float(2 ** (dimensions - 1)) / math.comb(dimensions - 1, dimensions // 2)


def _vector_domain(name: str, domain: Domain) -> NumericVector:
    if not isinstance(domain, NumericVector):
        raise CampaignError(f"mechanism {name!r} needs a vector domain of numeric attributes")
    return domain


def _corner_inputs(d: int) -> list[tuple[float, ...]]:
    """Corners and interior points: the extreme likelihood ratios sit at corners."""
    corners = [tuple(float(c) for c in bits) for bits in product((-1, 1), repeat=d)] \
        if d <= 4 else [(-1.0,) * d, (1.0,) * d, tuple((-1.0) ** i for i in range(d))]
    return [*corners, (0.0,) * d, tuple(0.5 - 0.3 * i for i in range(d))]


@dataclass(frozen=True, kw_only=True)
class VectorMechanism(Mechanism):
    """What every mechanism over a vector domain shares: D attributes, each clipped and mapped
    to [−1, 1] on the device, the declared ε, and corner inputs for the exhaustive tests."""

    domain_kinds: ClassVar[tuple[str, ...]] = ("vector",)
    estimate_kind: ClassVar[str] = "means"

    domain: NumericVector
    epsilon: float

    # Computed once per (frozen) mechanism: every report's randomizer and every output
    # probability reads it (4.2 million reads in the multidimensional tests).
    @cached_property
    def d(self) -> int:
        return self.domain.size

    def encode(self, value: object) -> tuple[float, ...]:
        return self.domain.to_unit(value)

    def inputs(self) -> Iterable[tuple[float, ...]]:
        return _corner_inputs(self.d)


@dataclass(frozen=True, kw_only=True)
class DuchiMultidim(VectorMechanism):
    """Payload: the sign vector s as a bit mask (bit j set when s_j = +1).

    The device draws v ∈ {±1}^D with P(v_j = 1) = (1 + t_j)/2, then s uniform on {±1}^D,
    replaced by −s when s·v < 0 (so s·v ≥ 0), and finally negates s with probability
    1/(e^ε + 1). Hence P(s | v) = 2p/2^D when s·v > 0, 2(1 − p)/2^D when s·v < 0 and 1/2^D for
    ties (s·v = 0, even D only), with p = e^ε/(e^ε + 1): three levels whose largest ratio is
    p/(1 − p) = e^ε. For odd D there are no ties and this is exactly Duchi et al.'s uniform draw
    from T⁺ or T⁻.

    Even D needs care: putting the ties in both T⁺ and T⁻ and drawing uniformly from one of them
    (MECHANISMS.md §9.3) gives ties probability 1/|T| and s·v < 0 probability (1 − p)/|T|, a
    ratio of 1 + e^ε between two inputs — not ε-LDP (the enumeration test catches it). Giving
    ties half the weight keeps ε exact. E[s | v] = (2/2^D)(2p − 1)·C(D−1, ⌊D/2⌋)·v for every D
    (ties cancel in pairs s, −s), so B = C_D·C_ε with C_D = 2^{D−1}/C(D−1, ⌊D/2⌋) makes B·s
    unbiased; for even D this B is smaller than §9.3's, hence a smaller variance B² − t_j².
    """

    name: ClassVar[str] = "duchi_md"

    #: The sign mask travels as a JSON integer, and the collector accepts integers of at most
    #: 19 digits (below 2⁶³): so at most 63 attributes.
    max_dimensions: ClassVar[int] = 63

    @classmethod
    def check_domain(cls, domain: Domain) -> None:
        vector = _vector_domain(cls.name, domain)
        if vector.size > cls.max_dimensions:
            raise CampaignError(f"duchi_md takes at most {cls.max_dimensions} attributes; for "
                                "more use harmony, pm_md or hm_md")

    @property
    def keep(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + 1)

    @property
    def b(self) -> float:
        """B = C_D·C_ε, the magnitude of every coordinate of t*."""
        e = math.exp(self.epsilon)
        return duchi_md_scale(self.d) * (e + 1) / (e - 1)

    def _dot(self, s: int, v: int) -> int:
        """s·v for two sign vectors given as masks: D − 2·(number of disagreements)."""
        return self.d - 2 * ((s ^ v) & ((1 << self.d) - 1)).bit_count()

    def randomize(self, x: tuple[float, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> int:
        v = sum(1 << j for j, t in enumerate(x) if bernoulli(rng, (1 + t) / 2))
        full = (1 << self.d) - 1
        s = rng.getrandbits(self.d)
        if self._dot(s, v) < 0:
            s ^= full  # −s: now s·v ≥ 0, strict halves twice as likely as ties
        return s if bernoulli(rng, self.keep) else s ^ full

    def payload_bounds(self) -> tuple[int, int]:
        return 0, (1 << self.d) - 1

    def check_payload(self, payload: object) -> int:
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not 0 <= payload < 1 << self.d:
            raise WireError(f"a duchi_md payload is a {self.d}-bit sign mask")
        return payload

    @property
    def report_bits(self) -> int:
        return self.d

    def report_value(self, payload: int) -> tuple[float, ...]:
        return tuple(self.b if (payload >> j) & 1 else -self.b for j in range(self.d))

    def output_probability(self, payload: int, x: tuple[float, ...]) -> float:
        total = 0.0
        for v in range(1 << self.d):
            weight = math.prod((1 + t) / 2 if (v >> j) & 1 else (1 - t) / 2
                               for j, t in enumerate(x))
            if weight == 0:
                continue
            dot = self._dot(payload, v)
            level = 2 * self.keep if dot > 0 else 2 * (1 - self.keep) if dot < 0 else 1.0
            total += weight * level / 2**self.d
        return total

    def outputs(self) -> Iterable[int]:
        if self.d > MAX_ENUMERATED_DIMENSIONS:
            raise TypeError("too many duchi_md outputs to enumerate")
        return range(1 << self.d)

    def per_coordinate_variance(self, x: tuple[float, ...]) -> tuple[float, ...]:
        """Var[t*_j | t] = B² − t_j², since |t*_j| = B."""
        return tuple(self.b**2 - t * t for t in x)

    def worst_case_variance(self) -> float:
        """max over t of Var[t*_j | t] = B² (t_j = 0)."""
        return self.b**2

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "scale_b": self.b, "clipping": "each attribute is "
                "clipped to its [lo, hi] on the device"}


@dataclass(frozen=True, kw_only=True)
class SampledAttributes(VectorMechanism):
    """k of D attributes drawn uniformly, each perturbed by a one-dimensional mechanism at ε/k;
    a report stands for (D/k)·t*_inner at the sampled coordinates and 0 elsewhere.

    Payload ``{"j": [k sorted attribute indices], "y": [k inner payloads]}``. The draw of the
    attributes does not depend on the value, and the k inner reports compose to ε.
    """

    inner_class: ClassVar[type[Mechanism]]
    inner_params: ClassVar[tuple[str, ...]] = ()

    k: int
    inner: Any  # the one-dimensional mechanism on [−1, 1] at ε/k

    @classmethod
    def default_k(cls, eps: float, d: int) -> int:
        return max(1, min(d, math.floor(eps / 2.5)))

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        check_params(params, ("k", *cls.inner_params), cls.name)
        eps = required_epsilon(cls.name, epsilon)
        vector = _vector_domain(cls.name, domain)
        k = params.get("k", cls.default_k(eps, vector.size))
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vector.size:
            raise CampaignError(f"{cls.name} parameter k must be an integer in "
                                f"[1, {vector.size}]")
        inner = cls.inner_class.resolve(
            epsilon=eps / k, domain=UNIT,
            params={p: params[p] for p in cls.inner_params if p in params})
        return cls(domain=vector, epsilon=eps, k=k, inner=inner)

    @property
    def scale(self) -> float:
        return self.d / self.k

    def params(self) -> dict[str, Any]:
        inner = self.inner.params()
        return {"k": self.k, **{p: inner[p] for p in self.inner_params}}

    def randomize(self, x: tuple[float, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, list[Any]]:
        chosen = sorted(rng.sample(range(self.d), self.k))
        return {"j": chosen, "y": [self.inner.randomize(x[j], rng) for j in chosen]}

    def check_payload(self, payload: object) -> dict[str, list[Any]]:
        if not isinstance(payload, dict) or set(payload) != {"j", "y"}:
            raise WireError(f'a {self.name} payload is {{"j": [...], "y": [...]}}')
        chosen, reports = payload["j"], payload["y"]
        if not isinstance(chosen, list) or len(chosen) != self.k or not all(
                isinstance(j, int) and not isinstance(j, bool) and 0 <= j < self.d
                for j in chosen) or chosen != sorted(set(chosen)):
            raise WireError(f"j must be {self.k} distinct sorted attribute indices below "
                            f"{self.d}")
        if not isinstance(reports, list) or len(reports) != self.k:
            raise WireError(f"y must hold {self.k} reports")
        return {"j": list(chosen), "y": [self.inner.check_payload(y) for y in reports]}

    @property
    def report_bits(self) -> int:
        index_bits = max(1, (self.d - 1).bit_length())
        return self.k * (index_bits + int(self.inner.report_bits))

    def report_value(self, payload: dict[str, list[Any]]) -> tuple[float, ...]:
        out = [0.0] * self.d
        for j, y in zip(payload["j"], payload["y"], strict=True):
            out[j] = self.scale * self.inner.report_value(y)
        return tuple(out)

    def output_probability(self, payload: dict[str, list[Any]],
                           x: tuple[float, ...]) -> float:
        probability = 1.0 / math.comb(self.d, self.k)
        for j, y in zip(payload["j"], payload["y"], strict=True):
            probability *= self.inner.output_probability(y, x[j])
        return probability

    def outputs(self) -> Iterable[dict[str, list[Any]]]:
        inner = list(self.inner.outputs())
        if math.comb(self.d, self.k) * len(inner) ** self.k > 1 << 16:
            raise TypeError(f"too many {self.name} outputs to enumerate")
        return ({"j": list(chosen), "y": list(ys)}
                for chosen in combinations(range(self.d), self.k)
                for ys in product(inner, repeat=self.k))

    def variance_bound(self, t: float) -> float:
        """Var[t*_j | t_j = t] = (D/k)·(Var_inner(t) + t²) − t² (bounded as the inner one)."""
        return self.scale * (float(self.inner.variance_bound(t)) + t * t) - t * t

    def worst_case_variance(self) -> float:
        """max over t_j (the bound is a quadratic in t_j: its maximum is at 0 or ±1)."""
        return max(self.variance_bound(0.0), self.variance_bound(1.0))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "attributes_per_report": self.k,
                "epsilon_per_attribute": self.inner.epsilon, "clipping": "each attribute is "
                "clipped to its [lo, hi] on the device"}


@dataclass(frozen=True, kw_only=True)
class Harmony(SampledAttributes):
    """Harmony: one attribute, Duchi's bit at the full ε (k = 1 always)."""

    name: ClassVar[str] = "harmony"
    inner_class: ClassVar[type[Mechanism]] = Duchi

    @classmethod
    def default_k(cls, eps: float, d: int) -> int:
        return 1

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        if params.get("k", 1) != 1:
            raise CampaignError("harmony reports one attribute (k = 1); for more use pm_md")
        return super().resolve(epsilon=epsilon, domain=domain, params=params)

    def params(self) -> dict[str, Any]:
        return {"k": 1}


@dataclass(frozen=True, kw_only=True)
class PiecewiseMultidim(SampledAttributes):
    name: ClassVar[str] = "pm_md"
    inner_class: ClassVar[type[Mechanism]] = PiecewiseMechanism
    inner_params: ClassVar[tuple[str, ...]] = ("resolution",)


@dataclass(frozen=True, kw_only=True)
class HybridMultidim(SampledAttributes):
    name: ClassVar[str] = "hm_md"
    inner_class: ClassVar[type[Mechanism]] = HybridMechanism
    inner_params: ClassVar[tuple[str, ...]] = ("resolution",)
