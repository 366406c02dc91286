"""Bloom-filter RAPPOR over open strings (Erlingsson, Pihur, Korolova, ACM CCS 2014).

MECHANISMS.md §5. A value is hashed into a k-bit Bloom filter with h hash functions, chosen by
the client's cohort (one of m). Each bit then goes through the permanent randomized response
(PRR: replaced by a fair coin with probability f) and the instantaneous randomized response
(IRR: reported as 1 with probability q if the PRR bit is 1, p if it is 0). google/rappor's
parameter names are kept: p = P(IRR=1 | PRR=0), q = P(IRR=1 | PRR=1), q > p.

One report's per-bit rates, with the PRR marginalised (neutral names, see MECHANISMS.md §16.7):

* r1 = P(report bit = 1 | Bloom bit = 1) = f(p + q)/2 + (1 − f)·q
* r0 = P(report bit = 1 | Bloom bit = 0) = f(p + q)/2 + (1 − f)·p

ε of one report is h·ln(r1(1 − r0) / (r0(1 − r1))): two values' Bloom filters differ in at most
2h bits. google/rappor's clients memoize the PRR per value, for which the paper states the
longitudinal bound ε∞ = 2h·ln((1 − f/2)/(f/2)) (shown in the config for reports imported from
them). Chorus clients do not memoize: the equality pattern of a memoized value sequence leaks
beyond ε∞ (see :mod:`chorus_shared.privacy`).

``randomize`` samples the two stages in one Bernoulli draw per bit with rates r1 / r0, and a
fresh cohort for every report; ``permanent`` then ``instantaneous`` with fresh coins give the
same distribution (a test checks it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar, Self

from chorus_shared.domain import Categories, Domain, OpenStrings, finite_float
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.hashing import (
    GOOGLE_MAX_BITS,
    GOOGLE_MAX_HASHES,
    MAX_COHORTS,
    MAX_HASHES,
    bloom_mask,
)
from chorus_shared.mechanisms.base import EMPTY, Mechanism, check_epsilon, check_params
from chorus_shared.rng import RandomSource, bernoulli_bits

__all__ = ["BasicRappor", "BooleanRappor", "Rappor"]

MAX_BITS = 4096
MAX_CELLS = 1 << 20  # k × m: bounds the collector's statistics per time bucket (8 MiB)
_PARAMS = ("k", "h", "m", "f", "p", "q", "hash")
_DEFAULTS = {"k": 32, "h": 2, "m": 16, "f": 0.0, "hash": "mmh3"}
HASH_SCHEMES = ("mmh3", "google-md5")


def _number(params: Mapping[str, Any], name: str) -> float:
    number = finite_float(params[name])
    if number is None:
        raise CampaignError(f"rappor parameter {name} must be a finite number")
    return number


def _integer(params: Mapping[str, Any], name: str, lo: int, hi: int) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CampaignError(f"rappor parameter {name} must be an integer in [{lo}, {hi}]")
    return value


def one_report_epsilon(h: int, f: float, p: float, q: float) -> float:
    r1 = f * (p + q) / 2 + (1 - f) * q
    r0 = f * (p + q) / 2 + (1 - f) * p
    if not 0 < r0 < r1 < 1:
        return math.inf
    return h * math.log(r1 * (1 - r0) / (r0 * (1 - r1)))


@dataclass(frozen=True, kw_only=True)
class Rappor(Mechanism):
    """Bloom-filter RAPPOR; payload ``{"cohort": c, "bits": "<hex>"}`` (bit i = 1 << i)."""

    name: ClassVar[str] = "rappor"
    domain_kinds: ClassVar[tuple[str, ...]] = ("strings",)
    estimate_kind: ClassVar[str] = "frequency"

    domain: OpenStrings
    k: int
    h: int
    m: int
    f: float
    p: float
    q: float
    hash: str = "mmh3"  # or "google-md5": google/rappor's Bloom hashing, to decode its clients

    @classmethod
    def _shape(cls, domain: Domain, merged: Mapping[str, Any]) -> tuple[int, int, int]:
        """(k, h, m) from the parameters: the Bloom filter and its cohorts."""
        if not isinstance(domain, OpenStrings):
            raise CampaignError("mechanism 'rappor' needs a strings domain")
        scheme = merged.get("hash")
        if scheme not in HASH_SCHEMES:
            raise CampaignError(f"rappor parameter hash must be one of {list(HASH_SCHEMES)}")
        google = scheme == "google-md5"
        k = _integer(merged, "k", 1, GOOGLE_MAX_BITS if google else MAX_BITS)
        h = _integer(merged, "h", 1, min(k, GOOGLE_MAX_HASHES if google else MAX_HASHES))
        m = _integer(merged, "m", 1, MAX_COHORTS)
        if k * m > MAX_CELLS:
            raise CampaignError(
                f"k × m = {k * m} exceeds {MAX_CELLS}: the collector keeps k + 1 counters per "
                "cohort and time bucket; use fewer bits or cohorts"
            )
        return k, h, m

    @classmethod
    def _epsilon_of(cls, h: int, f: float, p: float, q: float) -> float:
        return one_report_epsilon(h, f, p, q)

    @classmethod
    def _log_ratio_multiplier(cls, h: int) -> int:
        """With f = 0 and p = 1 − q, ε = this × ln(q/(1 − q)): two values' filters differ in
        h pairs of bits, each pair contributing (q/(1 − q))²."""
        return 2 * h

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        check_params(params, cls._allowed_params(), cls.name)
        merged = {**cls._defaults(), **params}
        k, h, m = cls._shape(domain, merged)
        f = _number(merged, "f")
        if not 0 <= f < 1:
            raise CampaignError(f"rappor parameter f must be in [0, 1), got {f}")
        if ("p" in merged) != ("q" in merged):
            raise CampaignError("give both p and q, or neither (they are then derived from ε)")
        if "p" in merged:
            p, q = _number(merged, "p"), _number(merged, "q")
            if not 0 <= p < q <= 1:
                raise CampaignError(f"rappor needs 0 <= p < q <= 1, got p={p}, q={q}")
            claimed = cls._epsilon_of(h, f, p, q)
            if not math.isfinite(claimed):
                raise CampaignError("these f, p, q give no privacy (ε is infinite)")
            if epsilon is not None and not math.isclose(
                check_epsilon(epsilon), claimed, rel_tol=1e-9
            ):
                raise CampaignError(
                    f"epsilon = {epsilon} does not match k/h/f/p/q, which give ε = {claimed:.6f}"
                )
            check_epsilon(claimed)
        else:
            if epsilon is None:
                raise CampaignError("rappor needs epsilon, or explicit f, p and q")
            p, q = cls._symmetric_pq(check_epsilon(epsilon), h, f)
        return cls(domain=domain, k=k, h=h, m=m, f=f, p=p, q=q,  # type: ignore[arg-type]
                   hash=merged.get("hash", "mmh3"))

    @classmethod
    def _allowed_params(cls) -> tuple[str, ...]:
        return _PARAMS

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return dict(_DEFAULTS)

    @classmethod
    def _symmetric_pq(cls, epsilon: float, h: int, f: float) -> tuple[float, float]:
        """The (p, q = 1 − p) that make one report exactly ε-LDP."""
        if f == 0:  # closed form: ε = (ln-ratios per differing bit) × ln(q / (1 − q))
            z = math.exp(epsilon / cls._log_ratio_multiplier(h))
            return 1 / (1 + z), z / (1 + z)  # not 1 − q: that loses precision at large ε
        cap = cls._epsilon_of(h, f, 0.0, 1.0)
        if epsilon >= cap:
            raise CampaignError(
                f"epsilon = {epsilon} is unreachable with f = {f}: the PRR alone caps one "
                f"report at {cap:.4f}; lower f or epsilon"
            )
        lo, hi = 0.5, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if cls._epsilon_of(h, f, 1 - mid, mid) < epsilon:
                lo = mid
            else:
                hi = mid
        q = (lo + hi) / 2
        return 1 - q, q

    def bloom(self, x: Any, cohort: int) -> int:
        """The Bloom filter of an encoded value in a cohort: bit i is 1 << i."""
        return bloom_mask(x, cohort, self.k, self.h, self.hash)

    @property
    def r1(self) -> float:
        return self.f * (self.p + self.q) / 2 + (1 - self.f) * self.q

    @property
    def r0(self) -> float:
        return self.f * (self.p + self.q) / 2 + (1 - self.f) * self.p

    @property
    def epsilon(self) -> float:
        return self._epsilon_of(self.h, self.f, self.p, self.q)

    @property
    def epsilon_longitudinal(self) -> float:
        """ε∞ once the PRR is memoized per value; infinite when f = 0 (no PRR)."""
        if self.f == 0:
            return math.inf
        return 2 * self.h * math.log((1 - self.f / 2) / (self.f / 2))

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"k": self.k, "h": self.h, "m": self.m, "f": self.f,
                                  "p": self.p, "q": self.q}
        if self.hash != "mmh3":  # the default stays implicit: configs made before it match
            params["hash"] = self.hash
        return params

    def encode(self, value: object) -> Any:
        return self.domain.encode(value)

    def assign(self, rng: RandomSource) -> dict[str, int]:
        return {"cohort": rng.randrange(self.m)}

    def randomize(
        self, x: str, rng: RandomSource, assignment: Mapping[str, int] = EMPTY
    ) -> dict[str, Any]:
        cohort = assignment.get("cohort")
        if cohort is None:
            cohort = rng.randrange(self.m)
        bloom = self.bloom(x, cohort)
        # Bit-parallel: every bit drawn at r1 and at r0, each kept where the Bloom bit says.
        ones = bernoulli_bits(rng, self.k, self.r1) & bloom
        zeros = bernoulli_bits(rng, self.k, self.r0) & ~bloom & ((1 << self.k) - 1)
        return {"cohort": cohort, "bits": self.bits_to_hex(ones | zeros)}

    def permanent(self, x: str, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        """The PRR: each Bloom bit replaced by a fair coin with probability f (f exact)."""
        cohort = assignment.get("cohort")
        if cohort is None:
            cohort = rng.randrange(self.m)
        bloom = self.bloom(x, cohort)
        full = (1 << self.k) - 1
        # With probability f a bit becomes a fair coin (f/2 each way), else it stays.
        replaced = bernoulli_bits(rng, self.k, self.f)
        coins = bernoulli_bits(rng, self.k, 0.5)
        bits = (replaced & coins) | (~replaced & full & bloom)
        return {"cohort": cohort, "bits": self.bits_to_hex(bits)}

    def instantaneous(self, permanent: dict[str, Any], rng: RandomSource) -> dict[str, Any]:
        """The IRR, fresh for every report: 1 with probability q if the PRR bit is 1, else p."""
        prr = int(permanent["bits"], 16)
        ones = bernoulli_bits(rng, self.k, self.q) & prr
        zeros = bernoulli_bits(rng, self.k, self.p) & ~prr & ((1 << self.k) - 1)
        return {"cohort": permanent["cohort"], "bits": self.bits_to_hex(ones | zeros)}

    def bits_to_hex(self, bits: int) -> str:
        return format(bits, f"0{(self.k + 3) // 4}x")

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"cohort", "bits"}:
            raise WireError('a rappor payload is {"cohort": int, "bits": hex string}')
        cohort, bits = payload["cohort"], payload["bits"]
        if isinstance(cohort, bool) or not isinstance(cohort, int) or not 0 <= cohort < self.m:
            raise WireError(f"cohort must be an integer in [0, {self.m})")
        width = (self.k + 3) // 4
        if not isinstance(bits, str) or len(bits) != width:
            raise WireError(f"bits must be a hex string of exactly {width} characters")
        try:
            value = int(bits, 16)
        except ValueError:
            raise WireError("bits must be a hex string") from None
        if not all(c in "0123456789abcdef" for c in bits) or value >> self.k:
            raise WireError(f"bits must be lowercase hex below 2**{self.k}")
        return {"cohort": cohort, "bits": bits}

    @property
    def report_bits(self) -> int:
        return self.k + max(1, (self.m - 1).bit_length())

    def output_probability(self, payload: dict[str, Any], x: str) -> float:
        cohort = payload["cohort"]
        bloom = self.bloom(x, cohort)
        bits = int(payload["bits"], 16)
        prob = 1.0 / self.m  # the cohort is independent of the value
        for i in range(self.k):
            rate = self.r1 if (bloom >> i) & 1 else self.r0
            prob *= rate if (bits >> i) & 1 else 1.0 - rate
        return prob

    def outputs(self) -> Iterable[dict[str, Any]]:
        if self.k > 12:
            raise TypeError("enumerating RAPPOR outputs is only sensible for k <= 12")
        for cohort, bits in product(range(self.m), range(1 << self.k)):
            yield {"cohort": cohort, "bits": self.bits_to_hex(bits)}

    def inputs(self) -> Iterable[Any]:
        return [f"value-{i}" for i in range(8)]

    def describe(self) -> dict[str, Any]:
        eps_inf = self.epsilon_longitudinal
        return {
            **super().describe(),
            "r1": self.r1,
            "r0": self.r0,
            "epsilon_longitudinal": eps_inf if math.isfinite(eps_inf) else None,
        }


@dataclass(frozen=True, kw_only=True)
class BasicRappor(Rappor):
    """Basic RAPPOR: no Bloom filter, one bit per category (k = d, h = 1, one cohort).

    The same PRR and IRR. Two categories' one-hot vectors differ in one pair of bits, so one
    report is ln(r1(1 − r0)/(r0(1 − r1)))-LDP and ε∞ = 2·ln((1 − f/2)/(f/2)). Each category's
    share is read off its own bit, with no regression: a pure protocol with p* = r1, q* = r0.
    """

    name: ClassVar[str] = "basic_rappor"
    domain_kinds: ClassVar[tuple[str, ...]] = ("categories",)

    domain: Categories  # type: ignore[assignment]

    @classmethod
    def _allowed_params(cls) -> tuple[str, ...]:
        return ("f", "p", "q")

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        return {"f": 0.0}

    @classmethod
    def _shape(cls, domain: Domain, merged: Mapping[str, Any]) -> tuple[int, int, int]:
        if not isinstance(domain, Categories) or domain.size < 2:
            raise CampaignError(f"mechanism {cls.name!r} needs at least 2 categories")
        if domain.size > MAX_BITS:
            raise CampaignError(f"mechanism {cls.name!r} takes at most {MAX_BITS} categories")
        return domain.size, 1, 1

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "p": self.p, "q": self.q}

    def encode(self, value: object) -> Any:
        return self.domain.encode(value)

    def bloom(self, x: Any, cohort: int) -> int:
        return 1 << int(x)

    def inputs(self) -> Iterable[Any]:
        return range(self.domain.size)

    def support_probabilities(self) -> tuple[float, float]:
        """(p*, q*): category v's bit is 1 with r1 if the user holds v, r0 otherwise."""
        return self.r1, self.r0


@dataclass(frozen=True, kw_only=True)
class BooleanRappor(BasicRappor):
    """Boolean RAPPOR: two categories in a single bit (1 = the second category).

    Two inputs differ in one bit, so one report is ln(max(r1/r0, (1 − r0)/(1 − r1)))-LDP and
    ε∞ = ln((1 − f/2)/(f/2)).
    """

    name: ClassVar[str] = "boolean_rappor"

    @classmethod
    def _shape(cls, domain: Domain, merged: Mapping[str, Any]) -> tuple[int, int, int]:
        if not isinstance(domain, Categories) or domain.size != 2:
            raise CampaignError(f"mechanism {cls.name!r} needs exactly 2 categories")
        return 1, 1, 1

    @classmethod
    def _epsilon_of(cls, h: int, f: float, p: float, q: float) -> float:
        r1 = f * (p + q) / 2 + (1 - f) * q
        r0 = f * (p + q) / 2 + (1 - f) * p
        if not 0 < r0 < r1 < 1:
            return math.inf
        return math.log(max(r1 / r0, (1 - r0) / (1 - r1)))

    @classmethod
    def _log_ratio_multiplier(cls, h: int) -> int:
        return 1  # one differing bit

    @property
    def epsilon_longitudinal(self) -> float:
        if self.f == 0:
            return math.inf
        return math.log((1 - self.f / 2) / (self.f / 2))

    def encode(self, value: object) -> Any:
        if isinstance(value, bool):  # (False, True) = (first, second category)
            return int(value)
        return super().encode(value)

    def bloom(self, x: Any, cohort: int) -> int:
        return int(x)

    def support_probabilities(self) -> tuple[float, float]:
        raise TypeError("boolean RAPPOR has one bit for two categories; see its estimator")
