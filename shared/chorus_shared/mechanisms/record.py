"""Mechanisms over a record of several categorical attributes (a ``record`` domain).

The whole record is the privacy unit: each mechanism here is ε-LDP between *any* two records,
including two that differ in every attribute (MECHANISMS-2.md §2), and the enumeration tests
check exactly that.

* ``smp`` (the default to reach for): one attribute j drawn uniformly, independent of the
  record, reported by a frequency oracle at the full ε. Payload ``{"a": j, "y": report}``.
* ``spl``: every attribute reported, each by an oracle at ε/d. Payload ``{"y": [reports]}``.
* ``rsfd``: RS+FD[GRR] (Arcolezi et al., CIKM 2021): one attribute drawn and reported by k-RR,
  every other attribute replaced by a uniform fake value, the drawn index not sent. Its paper
  runs k-RR at an "amplified" ε' = ln(d(e^ε − 1) + 1) and claims ε; that holds only between
  records differing in one attribute, and two records differing in all of them are told apart
  at exactly ε' (MECHANISMS-2.md §2.1, §6.1). Chorus runs k-RR at the campaign's ε, which is
  therefore the true whole-record ε (the one the ledger charges), and states the weaker,
  one-attribute guarantee beside it: exact, ln(1 + (e^ε − 1)·w_max/Σ_i w_i) with
  w_i = k_i/(e^ε + k_i − 1), which is ln(1 + (e^ε − 1)/d) only when every attribute has the
  same number of categories (``one_attribute_epsilon``). Payload ``{"y": [indices]}``.
* ``marginals``: CALM's collection step (Zhang et al., CCS 2018): the sets of ``order``
  attributes (all C(d, order) of them) are the collected marginals; each report draws one set
  uniformly and reports the record's cell in that set's joint domain by an oracle at the full
  ε. Any marginal of at most ``order`` attributes, joint frequencies, conditional frequencies and
  independence tests follow. Payload ``{"s": set index, "y": report}``.

Each oracle is k-RR or OUE, whichever has the smaller exact variance at its ε and domain size
(MECHANISMS.md §12), and both sides derive the same choice from the config.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations, product
from typing import Any, ClassVar, Self

from chorus_shared.domain import Categories, Domain, Record
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import (
    EMPTY,
    IntParam,
    Mechanism,
    check_params,
    required_epsilon,
)
from chorus_shared.mechanisms.krr import KRR
from chorus_shared.mechanisms.pure import MAX_ENUMERATED_OUTPUTS, PureOracle
from chorus_shared.mechanisms.unary import OUE
from chorus_shared.rng import RandomSource

__all__ = [
    "MAX_MARGINAL_CELLS",
    "MAX_TOTAL_CELLS",
    "Marginals",
    "RandomSamplingFakeData",
    "RecordMechanism",
    "SampledAttribute",
    "SplitBudget",
    "least_variance_oracle",
    "one_attribute_epsilon",
]

#: The joint domain of one collected marginal (OUE's largest domain), and of all of them.
MAX_MARGINAL_CELLS = 4_096
MAX_TOTAL_CELLS = 1 << 18
#: Records enumerated by the exhaustive privacy tests.
MAX_ENUMERATED_RECORDS = 1 << 12


def least_variance_oracle(epsilon: float, categories: Categories) -> PureOracle:
    """k-RR or OUE at ε over ``categories``, whichever has the smaller Var* (ties: k-RR)."""
    krr = KRR.resolve(epsilon=epsilon, domain=categories, params={})
    oue = OUE.resolve(epsilon=epsilon, domain=categories, params={})
    return krr if krr.approximate_variance() <= oue.approximate_variance() else oue


def one_attribute_epsilon(epsilon: float, sizes: Sequence[int]) -> float:
    """RS+FD[GRR]'s exact ε between records that differ in one attribute only, its k-RR at ε.

    P(y | x) ∝ Σ_i w_i·(e^ε if y_i = x_i else 1) with w_i = k_i/(e^ε + k_i − 1) (k-RR's
    probability times k_i; the common factor is the fakes' Π 1/k_l over d). Records differing
    in attribute j alone are told apart most by a y with y_j = x_j ≠ x'_j and y_i ≠ x_i elsewhere
    (every k_i ≥ 2): the ratio is 1 + (e^ε − 1)·w_j/Σ_i w_i, largest for the largest w_j, that
    is the attribute with the most categories. With d attributes of one size it is the
    paper's ln(1 + (e^ε − 1)/d), to the bit: each w_i/w_max below is then exactly 1.
    """
    em1 = math.expm1(epsilon)
    widest = 1.0 + em1 / max(sizes)  # 1/w_max, as 1/w_i = 1 + (e^ε − 1)/k_i
    return math.log1p(em1 / math.fsum(widest / (1.0 + em1 / k) for k in sizes))


def _cells(size: int) -> Categories:
    """A joint domain's cells, named by their index (the oracle needs a categories domain)."""
    return Categories(tuple(str(i) for i in range(size)))


@dataclass(frozen=True, kw_only=True)
class RecordMechanism(Mechanism):
    """What the record mechanisms share: the record domain, ε, encoding and test inputs."""

    domain_kinds: ClassVar[tuple[str, ...]] = ("record",)
    estimate_kind: ClassVar[str] = "record"

    domain: Record
    epsilon: float

    @classmethod
    def record_of(cls, domain: Domain) -> Record:
        if not isinstance(domain, Record):
            raise CampaignError(f"mechanism {cls.name!r} takes a record domain "
                                '({"kind": "record", "attributes": [...]})')
        return domain

    # Computed once per (frozen) mechanism: every report's randomizer and the estimators read it.
    @cached_property
    def d(self) -> int:
        return self.domain.size

    def encode(self, value: object) -> tuple[int, ...]:
        return self.domain.encode(value)

    def inputs(self) -> Iterable[tuple[int, ...]]:
        if math.prod(self.domain.sizes) > MAX_ENUMERATED_RECORDS:
            raise TypeError(f"too many {self.name} records to enumerate")
        return product(*(range(k) for k in self.domain.sizes))

    @property
    @abstractmethod
    def oracles(self) -> tuple[PureOracle, ...]:
        """The frequency oracles the reports go through (per attribute, or per marginal)."""

    def _oracle_names(self) -> list[str]:
        return [o.name for o in self.oracles]


def _check_index(value: object, bound: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        raise WireError(f"{what} must be an integer in [0, {bound})")
    return value


@dataclass(frozen=True, kw_only=True)
class PerAttributeOracles(RecordMechanism):
    """A record mechanism with one oracle per attribute, all derived from ε alone."""

    attribute_oracles: tuple[PureOracle, ...]

    @classmethod
    def attribute_oracle(cls, epsilon: float, d: int, categories: Categories) -> PureOracle:
        """The oracle of one attribute of a d-attribute record at the campaign's ε."""
        return least_variance_oracle(epsilon, categories)

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        check_params(params, (), cls.name)
        eps = required_epsilon(cls.name, epsilon)
        record = cls.record_of(domain)
        return cls(domain=record, epsilon=eps, attribute_oracles=tuple(
            cls.attribute_oracle(eps, record.size, a) for a in record.attributes))

    @property
    def oracles(self) -> tuple[PureOracle, ...]:
        return self.attribute_oracles


@dataclass(frozen=True, kw_only=True)
class SampledAttribute(PerAttributeOracles):
    """SMP: one attribute, drawn uniformly and independently of the record, at the full ε."""

    name: ClassVar[str] = "smp"

    def randomize(self, x: tuple[int, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        j = rng.randrange(self.d)
        return {"a": j, "y": self.oracles[j].randomize(x[j], rng)}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"a", "y"}:
            raise WireError('an smp payload is {"a": attribute index, "y": report}')
        j = _check_index(payload["a"], self.d, "a (the attribute index)")
        return {"a": j, "y": self.oracles[j].check_payload(payload["y"])}

    @property
    def report_bits(self) -> int:
        return max(1, (self.d - 1).bit_length()) + max(o.report_bits for o in self.oracles)

    def output_probability(self, payload: dict[str, Any], x: tuple[int, ...]) -> float:
        j = payload["a"]
        return float(self.oracles[j].output_probability(payload["y"], x[j])) / self.d

    def outputs(self) -> Iterable[dict[str, Any]]:
        return ({"a": j, "y": y} for j, oracle in enumerate(self.oracles)
                for y in oracle.outputs())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "estimates": "record", "oracles": self._oracle_names(),
                "epsilon_per_attribute_report": self.epsilon,
                "answers": "each attribute's marginal (one attribute per report; joint "
                           "questions need mechanism 'marginals')"}


@dataclass(frozen=True, kw_only=True)
class SplitBudget(PerAttributeOracles):
    """SPL: every attribute, each by its own oracle at ε/d (they compose to ε)."""

    name: ClassVar[str] = "spl"

    @classmethod
    def attribute_oracle(cls, epsilon: float, d: int, categories: Categories) -> PureOracle:
        return least_variance_oracle(epsilon / d, categories)

    def randomize(self, x: tuple[int, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        return {"y": [o.randomize(v, rng) for o, v in zip(self.oracles, x, strict=True)]}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"y"} \
                or not isinstance(payload["y"], list) or len(payload["y"]) != self.d:
            raise WireError(f'an spl payload is {{"y": [{self.d} reports, one per attribute]}}')
        return {"y": [o.check_payload(y) for o, y in zip(self.oracles, payload["y"],
                                                         strict=True)]}

    @property
    def report_bits(self) -> int:
        return sum(o.report_bits for o in self.oracles)

    def output_probability(self, payload: dict[str, Any], x: tuple[int, ...]) -> float:
        return math.prod(o.output_probability(y, v)
                         for o, y, v in zip(self.oracles, payload["y"], x, strict=True))

    def outputs(self) -> Iterable[dict[str, Any]]:
        spaces = [list(o.outputs()) for o in self.oracles]
        if math.prod(len(s) for s in spaces) > MAX_ENUMERATED_OUTPUTS:
            raise TypeError("too many spl outputs to enumerate")
        return ({"y": list(ys)} for ys in product(*spaces))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "estimates": "record", "oracles": self._oracle_names(),
                "epsilon_per_attribute_report": self.epsilon / self.d,
                "answers": "each attribute's marginal"}


@dataclass(frozen=True, kw_only=True)
class RandomSamplingFakeData(PerAttributeOracles):
    """RS+FD[GRR] at the campaign's ε, which is its true whole-record ε (see the module)."""

    name: ClassVar[str] = "rsfd"

    @classmethod
    def attribute_oracle(cls, epsilon: float, d: int, categories: Categories) -> PureOracle:
        return KRR.resolve(epsilon=epsilon, domain=categories, params={})

    @property
    def krr_oracles(self) -> tuple[KRR, ...]:
        """The attributes' k-RR oracles (attribute_oracle makes nothing else)."""
        return tuple(o for o in self.attribute_oracles if isinstance(o, KRR))

    def randomize(self, x: tuple[int, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        sampled = rng.randrange(self.d)
        return {"y": [self.attribute_oracles[i].randomize(v, rng) if i == sampled
                      else rng.randrange(k)
                      for i, (v, k) in enumerate(zip(x, self.domain.sizes, strict=True))]}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"y"} \
                or not isinstance(payload["y"], list) or len(payload["y"]) != self.d:
            raise WireError(f'an rsfd payload is {{"y": [{self.d} category indices]}}')
        return {"y": [_check_index(y, k, f"y[{i}]") for i, (y, k) in
                      enumerate(zip(payload["y"], self.domain.sizes, strict=True))]}

    @property
    def report_bits(self) -> int:
        return sum(o.report_bits for o in self.attribute_oracles)

    def output_probability(self, payload: dict[str, Any], x: tuple[int, ...]) -> float:
        fake = math.prod(1.0 / k for k in self.domain.sizes)
        return sum(o.output_probability(y, v) * k * fake
                   for o, y, v, k in zip(self.attribute_oracles, payload["y"], x,
                                         self.domain.sizes, strict=True)) / self.d

    def outputs(self) -> Iterable[dict[str, Any]]:
        if math.prod(self.domain.sizes) > MAX_ENUMERATED_OUTPUTS:
            raise TypeError("too many rsfd outputs to enumerate")
        return ({"y": list(ys)} for ys in product(*(range(k) for k in self.domain.sizes)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "estimates": "record", "oracles": self._oracle_names(),
                "epsilon_one_attribute": one_attribute_epsilon(self.epsilon,
                                                               self.domain.sizes),
                "privacy_note": (
                    "epsilon is the true guarantee between any two records (and what the "
                    "ledger charges); epsilon_one_attribute is the exact guarantee between "
                    "records that differ in one attribute only, ln(1 + (e^ε − 1)·w_max/Σ w_i) "
                    "with w_i = k_i/(e^ε + k_i − 1). RS+FD's paper reports a guarantee of "
                    "this kind as its ε, as ln(1 + (e^ε − 1)/d), which is exact only when "
                    "every attribute has the same number of categories"),
                "answers": "each attribute's marginal"}


def _order_default(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    return 2


@dataclass(frozen=True, kw_only=True)
class Marginals(RecordMechanism):
    """Each report: one of the C(d, order) attribute sets, drawn uniformly, and the record's
    cell in that set's joint domain through an oracle at the full ε."""

    name: ClassVar[str] = "marginals"
    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="order", help="attributes per collected marginal", lo=2, hi=3,
                 default=_order_default),
    )

    order: int

    def __post_init__(self) -> None:
        if self.order > self.d:
            raise CampaignError(f"marginals order {self.order} exceeds the record's "
                                f"{self.d} attributes")
        sizes = [self.cells(s) for s in self.sets]
        if max(sizes) > MAX_MARGINAL_CELLS:
            worst = self.sets[sizes.index(max(sizes))]
            raise CampaignError(
                f"the marginal of {[self.domain.names[a] for a in worst]} has {max(sizes)} "
                f"cells; at most {MAX_MARGINAL_CELLS} are allowed (merge categories, lower "
                "order, or use smp for one-attribute marginals)")
        if sum(sizes) > MAX_TOTAL_CELLS:
            raise CampaignError(f"the collected marginals have {sum(sizes)} cells in all; at "
                                f"most {MAX_TOTAL_CELLS} are allowed")
        # The oracles, built once per campaign (frozen: set through object.__setattr__).
        object.__setattr__(self, "_oracles", tuple(
            least_variance_oracle(self.epsilon, _cells(k)) for k in sizes))

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        cls.record_of(domain)
        return super().resolve(epsilon=epsilon, domain=domain, params=params)

    # Computed once per (frozen) mechanism: the estimators read them many times per answer.
    @cached_property
    def sets(self) -> tuple[tuple[int, ...], ...]:
        """The collected attribute sets, in lexicographic order (their index is ``s``)."""
        return tuple(combinations(range(self.d), self.order))

    def cells(self, attributes: Sequence[int]) -> int:
        return math.prod(self.domain.sizes[a] for a in attributes)

    def cell(self, attributes: Sequence[int], x: Sequence[int]) -> int:
        """The record's cell in the joint domain of ``attributes``, row-major (the first
        attribute varies slowest)."""
        index = 0
        for a in attributes:
            index = index * self.domain.sizes[a] + x[a]
        return index

    @property
    def oracles(self) -> tuple[PureOracle, ...]:
        oracles: tuple[PureOracle, ...] = self.__dict__["_oracles"]
        return oracles

    def randomize(self, x: tuple[int, ...], rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        s = rng.randrange(len(self.sets))
        return {"s": s, "y": self.oracles[s].randomize(self.cell(self.sets[s], x), rng)}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or set(payload) != {"s", "y"}:
            raise WireError('a marginals payload is {"s": marginal index, "y": report}')
        s = _check_index(payload["s"], len(self.sets), "s (the marginal index)")
        return {"s": s, "y": self.oracles[s].check_payload(payload["y"])}

    @property
    def report_bits(self) -> int:
        return max(1, (len(self.sets) - 1).bit_length()) + max(o.report_bits
                                                                for o in self.oracles)

    def output_probability(self, payload: dict[str, Any], x: tuple[int, ...]) -> float:
        s = payload["s"]
        cell = self.cell(self.sets[s], x)
        return float(self.oracles[s].output_probability(payload["y"], cell)) / len(self.sets)

    def outputs(self) -> Iterable[dict[str, Any]]:
        return ({"s": s, "y": y} for s, oracle in enumerate(self.oracles)
                for y in oracle.outputs())

    def describe(self) -> dict[str, Any]:
        names = self.domain.names
        return {**super().describe(), "estimates": "record",
                "marginals": [[names[a] for a in s] for s in self.sets],
                "oracles": self._oracle_names(),
                "answers": f"marginals of up to {self.order} attributes, joint and conditional "
                           "frequencies, independence tests"}
