"""Local hashing: OLH and BLH (Wang, Blocki, Li, Jha, USENIX Security 2017). MECHANISMS.md §4.

Each report draws a hash function H from a public family, independently of the value, and
applies k-RR over the g hash buckets to H(x): keep it with p = e^ε/(e^ε + g − 1), otherwise
report one of the other g − 1 buckets (each q_g = 1/(e^ε + g − 1)). The report is (a, b, y).

The family is H_{a,b}(v) = ((a·v + b) mod P) mod g with P prime, a ∈ [1, P − 1], b ∈ [0, P − 1]:
the pure-Python client and the numpy collector compute it identically (a·v < 2⁶² fits int64).
For v ≠ v' the pair ((a v + b) mod P, (a v' + b) mod P) is uniform over distinct pairs, so the
collision probability c = Σ_r n_r(n_r − 1)/(P(P − 1)), n_r = #{u < P : u ≡ r mod g}, is known
exactly, and q* = c·p + (1 − c)·q_g makes the estimator exactly unbiased for this family
(with the usual 1/g it would be biased by O(g/P)).

OLH picks the integer g ∈ {⌊e^ε⌋ + 1, ⌈e^ε⌉ + 1} with the smaller exact variance and computes p
from the g it uses; BLH is g = 2. ε = ln(p/q_g) for every fixed H: exactly the claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["BLH", "OLH", "PRIME", "LocalHashing", "best_g", "collision_probability", "local_hash"]

PRIME = 2_147_483_647  # 2³¹ − 1


def local_hash(a: int, b: int, v: int, prime: int, g: int) -> int:
    return ((a * v + b) % prime) % g


def collision_probability(prime: int, g: int) -> float:
    """P[H(v) = H(v')] for v ≠ v' in the ((a·v + b) mod P) mod g family, exactly."""
    # Of the residues u < P, `extra` classes mod g hold s + 1 of them and the rest s: O(1),
    # not a list of g sizes (g grows as e^ε).
    s, extra = divmod(prime, g)
    pairs = extra * (s + 1) * s + (g - extra) * s * (s - 1)
    return pairs / (prime * (prime - 1))


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % k for k in range(2, math.isqrt(n) + 1)) if n < 10**7 else n == PRIME


@dataclass(frozen=True, kw_only=True)
class LocalHashing(PureOracle):
    """Payload ``{"a": int, "b": int, "y": int}``."""

    max_categories: ClassVar[int] = 1 << 20

    g: int = 2
    prime: int = PRIME

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="prime", help="the hash family's prime, above d", lo=3, hi=PRIME,
                 default=PRIME),
        IntParam(name="g", help="hash range", lo=2, hi=1 << 20, default=2),
    )

    def __post_init__(self) -> None:
        if self.prime <= self.d or not _is_prime(self.prime):
            raise CampaignError(f"prime must be a prime in ({self.d}, {PRIME}]")
        if self.g > self.prime:
            raise CampaignError("g must be an integer of at least 2 (and below the prime)")

    @property
    def p(self) -> float:
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.g - 1)

    @property
    def q_g(self) -> float:
        return 1 / (math.exp(self.epsilon) + self.g - 1)

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, int]:
        a = 1 + rng.randrange(self.prime - 1)
        b = rng.randrange(self.prime)
        bucket = local_hash(a, b, x, self.prime, self.g)
        if bernoulli(rng, self.p):
            y = bucket
        else:
            other = rng.randrange(self.g - 1)
            y = other + 1 if other >= bucket else other
        return {"a": a, "b": b, "y": y}

    def check_payload(self, payload: object) -> dict[str, int]:
        if not isinstance(payload, dict) or set(payload) != {"a", "b", "y"} or not all(
                isinstance(payload[k], int) and not isinstance(payload[k], bool)
                for k in ("a", "b", "y")):
            raise WireError(f'a {self.name} payload is {{"a": int, "b": int, "y": int}}')
        if not (1 <= payload["a"] < self.prime and 0 <= payload["b"] < self.prime
                and 0 <= payload["y"] < self.g):
            raise WireError(f"need 1 <= a < {self.prime}, 0 <= b < {self.prime}, "
                            f"0 <= y < {self.g}")
        return {"a": payload["a"], "b": payload["b"], "y": payload["y"]}

    @property
    def report_bits(self) -> int:
        return 2 * (self.prime - 1).bit_length() + max(1, (self.g - 1).bit_length())

    def output_probability(self, payload: dict[str, int], x: int) -> float:
        seed = 1.0 / ((self.prime - 1) * self.prime)  # the hash is independent of x
        bucket = local_hash(payload["a"], payload["b"], x, self.prime, self.g)
        return seed * (self.p if payload["y"] == bucket else self.q_g)

    def outputs(self) -> Iterable[dict[str, int]]:
        if (self.prime - 1) * self.prime * self.g > 1 << 16:
            raise TypeError("enumerating local hashing outputs needs a tiny prime")
        return ({"a": a, "b": b, "y": y}
                for a, b, y in product(range(1, self.prime), range(self.prime), range(self.g)))

    def support(self, payload: Any) -> set[int]:
        return {v for v in range(self.d)
                if local_hash(payload["a"], payload["b"], v, self.prime, self.g) == payload["y"]}

    def support_probabilities(self) -> tuple[float, float]:
        c = collision_probability(self.prime, self.g)
        return self.p, c * self.p + (1 - c) * self.q_g


@dataclass(frozen=True, kw_only=True)
class BLH(LocalHashing):
    name: ClassVar[str] = "blh"


@dataclass(frozen=True, kw_only=True)
class OLH(LocalHashing):
    name: ClassVar[str] = "olh"

    parameters: ClassVar[tuple[IntParam, ...]] = (
        LocalHashing.parameters[0],
        IntParam(name="g", help="hash range", lo=2, hi=1 << 20,
                 default=lambda eps, domain, earlier: best_g(eps, earlier["prime"])),
    )


def best_g(eps: float, prime: int) -> int:
    """OLH's g: the integer near e^ε + 1 with the least exact Var* (computed, not rounded:
    e.g. e^(ln 3) = 3.0000000000000004 must still give g = 4)."""
    e = math.exp(eps)
    options = {max(2, math.floor(e) + 1), max(2, math.ceil(e) + 1)}

    def variance(g: int) -> float:
        p = e / (e + g - 1)
        c = collision_probability(prime, g)
        q_star = c * p + (1 - c) / (e + g - 1)
        return q_star * (1 - q_star) / (p - q_star) ** 2

    return min(sorted(options), key=variance)
