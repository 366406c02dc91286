"""Apple's Count-Mean Sketch (CMS) and Hadamard Count-Mean Sketch (HCMS). MECHANISMS.md §7.3.

Source: Apple Differential Privacy Team, "Learning with Privacy at Scale" (2017). Values are
open strings; the campaign fixes k public hash functions h_0..h_{k−1} into [m] (murmur3 with
seed j, the same ``bloom_bits`` hashing as RAPPOR's cohort j, one hash).

* CMS: draw j uniform on [k]; v ∈ {−1, +1}^m is +1 at h_j(x) only; flip every coordinate with
  probability 1/(1 + e^{ε/2}); send (j, ṽ) as m bits (1 = +1). Two values change at most two
  coordinates, each by e^{ε/2}: ε-LDP, tight when both coordinates differ.
* HCMS (m a power of two): draw j on [k] and l on [m]; w = H_m[l, h_j(x)] ∈ {±1}; send w with
  probability e^ε/(e^ε + 1), −w otherwise: one bit, ε-LDP.

The collector keeps per-row counts and estimates a candidate's count with Apple's estimator
ĉ(v) = m/(m − 1)·((1/k)·Σ_l M[l, h_l(v)] − n/m). It is unbiased on average over the hash
functions; for the fixed public hashes a candidate also collects the mass of values that
collide with it in a row, beyond the 1/m the estimator subtracts (MECHANISMS.md §7.3).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

from chorus_shared.domain import OpenStrings
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.hashing import bloom_bits
from chorus_shared.mechanisms.base import EMPTY, IntParam, Mechanism
from chorus_shared.mechanisms.succinct import hadamard_sign
from chorus_shared.rng import RandomSource, bernoulli, bernoulli_bits

__all__ = ["CountMeanSketch", "HadamardCountMeanSketch"]

MAX_WIDTH = 4096
MAX_HASH_FUNCTIONS = 4096  # a query hashes every candidate k times
MAX_SKETCH_CELLS = 1 << 20
DEFAULT_HASHES = 32
DEFAULT_WIDTH = 1024


@dataclass(frozen=True, kw_only=True)
class CountMeanSketch(Mechanism):
    """Payload ``{"j": hash index, "bits": "<hex of m bits>"}`` (bit i = 1 << i means +1)."""

    name: ClassVar[str] = "cms"
    domain_kinds: ClassVar[tuple[str, ...]] = ("strings",)
    estimate_kind: ClassVar[str] = "frequency"

    domain: OpenStrings
    epsilon: float
    k: int
    m: int

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="k", help="hash functions", lo=1, hi=MAX_HASH_FUNCTIONS,
                 default=DEFAULT_HASHES),
        IntParam(name="m", help="sketch width", lo=2, hi=MAX_WIDTH, default=DEFAULT_WIDTH),
    )

    def __post_init__(self) -> None:
        if self.k * self.m > MAX_SKETCH_CELLS:
            raise CampaignError(f"k × m = {self.k * self.m} exceeds {MAX_SKETCH_CELLS}")

    @property
    def flip(self) -> float:
        """1/(1 + e^{ε/2}): the probability that one coordinate is flipped."""
        return 1 / (1 + math.exp(self.epsilon / 2))

    @property
    def c(self) -> float:
        """c_ε = (e^{ε/2} + 1)/(e^{ε/2} − 1)."""
        z = math.exp(self.epsilon / 2)
        return (z + 1) / (z - 1)

    def encode(self, value: object) -> str:
        return self.domain.encode(value)

    def position(self, x: str, j: int) -> int:
        """h_j(x)."""
        return bloom_bits(x, j, self.m, 1)[0]

    def _hex(self, bits: int) -> str:
        return format(bits, f"0{(self.m + 3) // 4}x")

    def randomize(self, x: str, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        j = rng.randrange(self.k)
        # v is +1 only at h_j(x); every coordinate flips with probability 1/(1 + e^{ε/2}).
        bits = (1 << self.position(x, j)) ^ bernoulli_bits(rng, self.m, self.flip)
        return {"j": j, "bits": self._hex(bits)}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"j", "bits"}:
            raise WireError('a cms payload is {"j": int, "bits": hex string}')
        j, bits = payload["j"], payload["bits"]
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < self.k:
            raise WireError(f"j must be an integer in [0, {self.k})")
        width = (self.m + 3) // 4
        if not isinstance(bits, str) or len(bits) != width or \
                not all(ch in "0123456789abcdef" for ch in bits) or int(bits, 16) >> self.m:
            raise WireError(f"bits must be {width} lowercase hex characters below 2**{self.m}")
        return {"j": j, "bits": bits}

    @property
    def report_bits(self) -> int:
        return self.m + max(1, (self.k - 1).bit_length())

    def output_probability(self, payload: dict[str, Any], x: str) -> float:
        hot = self.position(x, payload["j"])
        bits = int(payload["bits"], 16)
        probability = 1.0 / self.k
        for i in range(self.m):
            truth = i == hot
            probability *= 1 - self.flip if bool((bits >> i) & 1) == truth else self.flip
        return probability

    def outputs(self) -> Iterable[dict[str, Any]]:
        if self.m > 12:
            raise TypeError("enumerating cms outputs is only sensible for m <= 12")
        return ({"j": j, "bits": self._hex(bits)}
                for j, bits in product(range(self.k), range(1 << self.m)))

    def inputs(self) -> Iterable[str]:
        return [f"value-{i}" for i in range(8)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "hash_functions": self.k, "sketch_width": self.m}


@dataclass(frozen=True, kw_only=True)
class HadamardCountMeanSketch(CountMeanSketch):
    """Payload ``{"j": hash index, "l": Hadamard row, "b": 0 or 1}`` (b = 1 means +1)."""

    name: ClassVar[str] = "hcms"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.m & (self.m - 1):
            raise CampaignError(f"hcms parameter m must be a power of two, got {self.m}")

    @property
    def keep(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + 1)

    @property
    def c(self) -> float:
        """c_ε = (e^ε + 1)/(e^ε − 1)."""
        e = math.exp(self.epsilon)
        return (e + 1) / (e - 1)

    def randomize(self, x: str, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        j, row = rng.randrange(self.k), rng.randrange(self.m)
        sign = hadamard_sign(row, self.position(x, j))
        return {"j": j, "l": row, "b": sign if bernoulli(rng, self.keep) else 1 - sign}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"j", "l", "b"}:
            raise WireError('an hcms payload is {"j": int, "l": int, "b": 0 or 1}')
        for key, bound in (("j", self.k), ("l", self.m), ("b", 2)):
            value = payload[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
                raise WireError(f"{key} must be an integer in [0, {bound})")
        return {"j": payload["j"], "l": payload["l"], "b": payload["b"]}

    @property
    def report_bits(self) -> int:
        return 1 + max(1, (self.k - 1).bit_length()) + max(1, (self.m - 1).bit_length())

    def output_probability(self, payload: dict[str, Any], x: str) -> float:
        sign = hadamard_sign(payload["l"], self.position(x, payload["j"]))
        return (self.keep if payload["b"] == sign else 1 - self.keep) / (self.k * self.m)

    def outputs(self) -> Iterable[dict[str, Any]]:
        return ({"j": j, "l": row, "b": b}
                for j, row, b in product(range(self.k), range(self.m), (0, 1)))
