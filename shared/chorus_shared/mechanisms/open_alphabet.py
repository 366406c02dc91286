"""O-RR and O-RAPPOR for open alphabets (Kairouz, Bonawitz, Ramage, ICML 2016). §6.

Values are not known in advance: each install draws a cohort c of m (public, independent of
its value) and hashes its string into one of k bins with the cohort's hash h_c (murmur3 with a
per-cohort seed, the same ``bloom_bits`` as RAPPOR with one hash function).

* O-RR reports (c, y) with y = k-RR_ε(h_c(x)): the true bin with probability
  p = e^ε/(e^ε + k − 1), any other bin with q = 1/(e^ε + k − 1). ⌈log₂ m⌉ + ⌈log₂ k⌉ bits.
* O-RAPPOR reports (c, k-RAPPOR_ε(h_c(x))): the one-hot vector of the bin, each bit kept with
  probability e^{ε/2}/(e^{ε/2} + 1) (basic one-time RAPPOR). It is Bloom-filter RAPPOR with
  h = 1 and no permanent randomization (f = 0), so it shares RAPPOR's wire format and decoder.

The collector decodes against the analyst's candidates by weighted least squares over the
cohort × bin design matrix, exactly as for RAPPOR (MECHANISMS.md §6 "lower-variance variant":
per-cohort normalisation). Kairouz et al.: O-RR is order-optimal at large ε, O-RAPPOR at small.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from chorus_shared.domain import Domain, OpenStrings
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.hashing import MAX_COHORTS, bloom_bits
from chorus_shared.mechanisms.base import (
    EMPTY,
    IntParam,
    Mechanism,
    check_params,
    required_epsilon,
)
from chorus_shared.mechanisms.rappor import MAX_CELLS, Rappor
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["OpenRR", "OpenRappor"]

MAX_BINS = 4096
DEFAULT_BINS = 32
DEFAULT_COHORTS = 16


#: O-RR's and O-RAPPOR's shape: k hash bins (or bits) and m cohorts.
SHAPE: tuple[IntParam, ...] = (
    IntParam(name="k", help="bins", lo=2, hi=MAX_BINS, default=DEFAULT_BINS),
    IntParam(name="m", help="cohorts", lo=1, hi=MAX_COHORTS, default=DEFAULT_COHORTS),
)


def _check_cells(k: int, m: int) -> None:
    if k * m > MAX_CELLS:
        raise CampaignError(f"k × m = {k * m} exceeds {MAX_CELLS}; use fewer bins or cohorts")


def _shape(name: str, domain: Domain, params: Mapping[str, Any]) -> tuple[int, int]:
    if not isinstance(domain, OpenStrings):
        raise CampaignError(f"mechanism {name!r} needs a strings domain")
    values: dict[str, int] = {}
    for parameter in SHAPE:
        values[parameter.name] = parameter.read(name, params, 0.0, domain, values)
    _check_cells(values["k"], values["m"])
    return values["k"], values["m"]


@dataclass(frozen=True, kw_only=True)
class OpenRR(Mechanism):
    """Payload ``{"cohort": c, "y": bin}``."""

    name: ClassVar[str] = "o_rr"
    domain_kinds: ClassVar[tuple[str, ...]] = ("strings",)
    estimate_kind: ClassVar[str] = "frequency"
    #: Shared with RAPPOR's decoder: one hash function, murmur3 Bloom hashing.
    h: ClassVar[int] = 1
    hash: ClassVar[str] = "mmh3"

    domain: OpenStrings
    epsilon: float
    k: int
    m: int

    parameters: ClassVar[tuple[IntParam, ...]] = SHAPE

    def __post_init__(self) -> None:
        _check_cells(self.k, self.m)

    @property
    def r1(self) -> float:
        """P(y = j | h_c(x) = j) = p."""
        e = math.exp(self.epsilon)
        return e / (e + self.k - 1)

    @property
    def r0(self) -> float:
        """P(y = j | h_c(x) ≠ j) = q."""
        return 1 / (math.exp(self.epsilon) + self.k - 1)

    def encode(self, value: object) -> str:
        return self.domain.encode(value)

    def bin(self, x: str, cohort: int) -> int:
        return bloom_bits(x, cohort, self.k, 1)[0]

    def assign(self, rng: RandomSource) -> dict[str, int]:
        return {"cohort": rng.randrange(self.m)}

    def randomize(self, x: str, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, int]:
        cohort = assignment.get("cohort")
        if cohort is None:
            cohort = rng.randrange(self.m)
        true_bin = self.bin(x, cohort)
        if bernoulli(rng, self.r1):
            return {"cohort": cohort, "y": true_bin}
        other = rng.randrange(self.k - 1)  # uniform over the k − 1 other bins
        return {"cohort": cohort, "y": other + (other >= true_bin)}

    def check_payload(self, payload: object) -> dict[str, int]:
        if not isinstance(payload, dict) or set(payload) != {"cohort", "y"}:
            raise WireError('an o_rr payload is {"cohort": int, "y": int}')
        cohort, y = payload["cohort"], payload["y"]
        if isinstance(cohort, bool) or not isinstance(cohort, int) or not 0 <= cohort < self.m:
            raise WireError(f"cohort must be an integer in [0, {self.m})")
        if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < self.k:
            raise WireError(f"y must be an integer in [0, {self.k})")
        return {"cohort": cohort, "y": y}

    @property
    def report_bits(self) -> int:
        return max(1, (self.m - 1).bit_length()) + max(1, (self.k - 1).bit_length())

    def output_probability(self, payload: dict[str, int], x: str) -> float:
        hit = payload["y"] == self.bin(x, payload["cohort"])
        return (self.r1 if hit else self.r0) / self.m

    def outputs(self) -> Iterable[dict[str, int]]:
        return ({"cohort": c, "y": y} for c in range(self.m) for y in range(self.k))

    def inputs(self) -> Iterable[str]:
        return [f"value-{i}" for i in range(8)]


@dataclass(frozen=True, kw_only=True)
class OpenRappor(Rappor):
    """O-RAPPOR: RAPPOR with one hash (k bins per cohort) and no PRR. p and q follow from ε
    (p = 1/(e^{ε/2} + 1) = 1 − q); the config carries them, so ε round-trips exactly."""

    name: ClassVar[str] = "o_rappor"

    @classmethod
    def _allowed_params(cls) -> tuple[str, ...]:
        return ("k", "m", "p", "q")

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {"k": DEFAULT_BINS, "h": 1, "m": DEFAULT_COHORTS, "f": 0.0, "hash": "mmh3"}

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        check_params(params, cls._allowed_params(), cls.name)
        _shape(cls.name, domain, params)
        if "p" not in params:
            required_epsilon(cls.name, epsilon)
        return super().resolve(epsilon=epsilon, domain=domain, params=params)

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "m": self.m, "p": self.p, "q": self.q}
